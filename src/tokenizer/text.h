// text.h — the byte/character helpers of the tokenizer: UTF-8 checking and stepping, the GPT-2
// byte<->character table of ByteLevel, Unicode normalization forms (utf8proc) and the two Unicode
// character sets that added tokens use (Rust regex `\s` and `\w`).
// Not a general Unicode library: only what src/tokenizer needs, on std::string holding UTF-8.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace phasescope {

// Byte offset of the first invalid UTF-8 sequence (overlong, surrogate, > U+10FFFF, truncated),
// or npos when `s` is valid.
size_t utf8_invalid_at(std::string_view s);

// Decode the code point at s[i] (s valid UTF-8); sets `len` to its byte length.
uint32_t utf8_decode(std::string_view s, size_t i, int& len);
void utf8_append(std::string& out, uint32_t cp);

// Replace every invalid sequence by U+FFFD, as Rust's String::from_utf8_lossy does (one U+FFFD per
// maximal invalid prefix).
std::string utf8_lossy(std::string_view bytes);

// ---- ByteLevel (GPT-2): every byte has a printable stand-in character.
// bytes 33..126, 161..172, 174..255 stand for themselves; the other 68 map to U+0100.. in order.
uint32_t byte_level_char(uint8_t b);
int byte_level_byte(uint32_t cp);  // inverse; -1 for a character outside the table

// Token string (stand-in characters) -> raw bytes; false when a character is outside the table.
bool byte_level_to_bytes(std::string_view token, std::string& bytes);

// ---- Unicode normalization forms (utf8proc).
enum class NormalForm { NFC, NFD, NFKC, NFKD };
const char* normal_form_name(NormalForm f);
std::string normalize(std::string_view utf8, NormalForm form);  // input must be valid UTF-8

// ---- character sets of the added-token rules (Rust regex semantics).
bool is_unicode_space(uint32_t cp);  // White_Space property (`\s`)
bool is_word_char(uint32_t cp);      // letters, marks, numbers, connector punctuation (`\w`)

}  // namespace phasescope
