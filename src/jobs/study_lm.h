// study_lm.h — a language model's own probes in the study, beside the lookup every row has: the needle in
// natural-text filler (a protocol named kStudyNeedle) and the padding flip on code (StudyFlip). Each is
// journaled under the run's folder (DIR/eval/needle-n<samples>, DIR/eval/flip-<template>-L<min>-<max>) and
// resumes; a probe that cannot be built or scored costs the row nothing else: it is logged and left out, and
// a later invocation adds it where the trained model is still on disk. Not here: training, the lookup, the
// copy loss (study.cpp); the probes themselves (probe/).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "http/token_source.h"
#include "jobs/study_row.h"
#include "probe/flip.h"

namespace phasescope {

struct LoadedModel;
struct Corpus;

// The probes a finished language model's row lacks ("needle", "flip"); empty for a task-trained row.
std::vector<std::string> study_lm_probes_missing(const StudyRow& row);

// Add to `row` the probes it lacks, scoring the trained model (R residues and `samples` prompts for the
// needle, as the row's lookup); returns one line per probe that failed (the row is kept without it).
std::vector<std::string> study_lm_probes(StudyRow& row, const LoadedModel& trained, const Corpus& corpus,
                                         int R, int64_t samples, bool fresh, const std::string& dir);

// The same for a finished row read from disk: the trained model from DIR/model, the corpus its preset
// names, the needle on as many prompts as the row's other protocols.
std::vector<std::string> study_lm_probes_add(StudyRow& row, bool fresh, const std::string& dir);

// The flip's sweep for a language model of context `context` and stride S: the audit's (audit/flip_check.h:
// the paper's FP8 kernel, max(16, 4S) lengths from L = 24, at most 256), the window started instead at the
// tokens of the text before the filler (BOS counted) when that is longer (a small vocabulary), its longest
// lengths dropped until the longest prompt and candidate fit the context; the short FP8 example when fewer
// than 16 lengths would remain. Throws Error naming each template's reason when neither gives 16.
struct StudyFlipDesign {
  std::string name;  // "fp8" | "fp8-short"
  FlipDesign design;
};
StudyFlipDesign study_flip_design(int64_t context, int S, const TokenSource& tokens);

}  // namespace phasescope
