// local_tokenizer_source.h — a local HuggingFace tokenizer.json as a TokenSource (the CLI's
// --tokenizer PATH), through phasescope's own tokenizer (src/tokenizer/tokenizer.h, another module).
// When that module is not part of the build yet, opening one fails with a clear message and the
// server's /tokenize remains the source of truth. Not here: any tokenization logic.
#pragma once
#include <memory>
#include <string>

#include "http/token_source.h"

namespace phasescope {

// True when this build has the local tokenizer.
bool local_tokenizer_available();

// Load PATH (a tokenizer.json, or a folder holding one). Throws Error when it cannot be read or the
// build has no local tokenizer.
std::unique_ptr<TokenSource> local_tokenizer_open(const std::string& path);

}  // namespace phasescope
