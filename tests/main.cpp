// main.cpp — the one main() of every test binary: the same runtime set-up as the CLI
// (core/runtime.h), then GoogleTest.
#include <gtest/gtest.h>

#include "core/runtime.h"

int main(int argc, char** argv) {
  phasescope::runtime_init();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
