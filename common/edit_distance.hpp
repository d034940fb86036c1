// How far apart two words are, for the "did you mean" of muster's command
// line and of musterd's options and config file.
#pragma once

#include <cstddef>
#include <string>

namespace muster {

// Optimal string alignment: insertions, deletions, substitutions and
// swaps of neighbours ("rnu" is one step from "run").
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace muster
