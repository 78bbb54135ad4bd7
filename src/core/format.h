// format.h — the small number-to-text helpers that logs, tables and reports share, so a percentage or a
// duration reads the same everywhere. Header-only and torch-free; fmt is the only dependency.
// Not here: table layout, units other than percent and time, anything that parses.
#pragma once
#include <fmt/format.h>

#include <cmath>
#include <string>

namespace phasescope {

// A fraction as a percentage with one decimal, without the sign: 0.4567 -> "45.7". "n/a" when the
// fraction is NaN or infinite (e.g. a phase with no scored tokens).
inline std::string pct(double fraction) {
  return std::isfinite(fraction) ? fmt::format("{:.1f}", 100 * fraction) : "n/a";
}

// A duration in the coarsest unit that still reads well: under 90 s in seconds ("42 s"), under 90 min
// in minutes ("17 min"), else in hours with one decimal ("2.5 h").
inline std::string fmt_duration(double seconds) {
  if (seconds < 90) return fmt::format("{:.0f} s", seconds);
  if (seconds < 5400) return fmt::format("{:.0f} min", seconds / 60);
  return fmt::format("{:.1f} h", seconds / 3600);
}

}  // namespace phasescope
