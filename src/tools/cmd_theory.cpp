// placeholder until the theory module lands (being written in parallel)
#include "tools/commands.h"
namespace phasescope {
void add_theory_command(CLI::App& app) { (void)app; }
}  // namespace phasescope
