// py_backend.h — the evaluation's Python side: a Backend whose answers come from a Python callable
// (score_fn(ids: LongTensor [B, T]) -> log-probabilities [B, V] of the token after each row's last token),
// and the layout / evaluation entry points of phasescope._core. The layout spec is a JSON text that
// phasescope/evaluate.py writes (fields: task, protocol, samples, residues, seed, pad, bootstrap, model,
// fresh, report, and one of preset, checkpoint or ids {bos, size, keys, names, fillers}).
// Rows of different lengths are never padded: a batch is split into groups of equal length, one call
// each, so a score_fn never sees padding and every position is the token's true absolute position (the
// phase is what is measured). A score_fn that raises or returns the wrong shape fails its samples, as an
// HTTP error does: the engine retries them, and gives up after 3 batches in a row with no answer at all.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pybind11/pybind11.h>

#include <string>

namespace phasescope {

// "[2, 3, 4]": a tensor's sizes or strides in an error message.
template <class Ints>
std::string shape_str(const Ints& v) {
  return "[" + fmt::format("{}", fmt::join(v.begin(), v.end(), ", ")) + "]";
}

// The layout as a JSON text: {"vocab_size", "R", "samples": [{"id", "base", "residue", "target_pos",
// "answer", "tokens"}, ...]}.
std::string py_layout(const std::string& spec_json);

// Run (or resume) the evaluation into out_dir with score_fn as the backend; returns results.json's text.
// Writes results.json, per_residue.csv, table.txt, journal.jsonl and card.json there, as `eval` does.
std::string py_evaluate(pybind11::function score_fn, const std::string& spec_json,
                        const std::string& out_dir);

// The same evaluation of spec["checkpoint"] with the in-process C++ backend (`phasescope eval`'s), for
// comparison and for users who have a phasescope checkpoint; returns results.json's text.
std::string py_evaluate_checkpoint(const std::string& spec_json, const std::string& out_dir);

}  // namespace phasescope
