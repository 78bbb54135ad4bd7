// card_report.h — a phase card as one self-contained HTML page (the audit's card.html): the checks'
// verdicts with their reasons, rules and figures; the accuracy folded to the grid's period and per residue,
// each with its 95% interval and a bar; where the grid starts; the provenance. Tables and bars are plain
// HTML (no gnuplot needed), so the page renders wherever the card was made.
// Not here: the card's JSON (card.h) or how its numbers were computed.
#pragma once
#include <string>

#include "eval/card.h"
#include "report/document.h"

namespace phasescope {

ReportDoc card_report(const PhaseCard& card);

// card_report rendered and written atomically to path (its folder must exist).
void card_write_html(const PhaseCard& card, const std::string& path);

}  // namespace phasescope
