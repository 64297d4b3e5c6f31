#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <sentencepiece_processor.h>
#include <utf8proc.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <map>
#include <unordered_map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

namespace deployc {

using nlohmann::json;

int64_t Tokenizer::pad_id() const {
  for (const char* t : {"[PAD]", "<pad>", "<|pad|>"})
    if (auto id = token_id(t)) return *id;
  return 0;
}

namespace {

// ---- UTF-8 and character classes (the definitions `tokenizers` uses, from Rust's char and
// unicode_categories, with utf8proc's tables) ----------------------------------------------------------

bool decode_utf8(const std::string& s, std::vector<int32_t>& out, size_t* bad_at = nullptr) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t i = 0, n = static_cast<utf8proc_ssize_t>(s.size());
  while (i < n) {
    utf8proc_int32_t c;
    utf8proc_ssize_t len = utf8proc_iterate(p + i, n - i, &c);
    if (len <= 0 || c < 0) {
      if (bad_at) *bad_at = static_cast<size_t>(i);
      return false;
    }
    out.push_back(c);
    i += len;
  }
  return true;
}

void append_utf8(std::string& s, int32_t c) {
  utf8proc_uint8_t buf[4];
  auto n = utf8proc_encode_char(c, buf);
  s.append(reinterpret_cast<char*>(buf), static_cast<size_t>(n));
}

std::string to_utf8(const std::vector<int32_t>& cps, size_t from = 0, size_t to = SIZE_MAX) {
  std::string s;
  for (size_t i = from; i < std::min(to, cps.size()); ++i) append_utf8(s, cps[i]);
  return s;
}

// Rust's char::is_whitespace: the White_Space property.
bool is_whitespace(int32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

utf8proc_category_t category(int32_t c) { return utf8proc_category(c); }

bool is_other(int32_t c) {  // unicode_categories' is_other: Cc, Cf, Cn, Co, Cs
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CN ||
         k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CS;
}

bool is_punctuation(int32_t c) {  // BERT's: ASCII punctuation (symbols included) or a P* category
  if (c < 128) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  auto k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_chinese(int32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Rust's to_lowercase: the simple mapping plus the one unconditional multi-character one (U+0130).
void lowercase(std::vector<int32_t>& cps) {
  std::vector<int32_t> out;
  out.reserve(cps.size());
  for (int32_t c : cps) {
    if (c == 0x130) {
      out.push_back('i');
      out.push_back(0x307);
    } else {
      out.push_back(utf8proc_tolower(c));
    }
  }
  cps.swap(out);
}

bool normalize_form(std::vector<int32_t>& cps, int options) {
  std::string s = to_utf8(cps);
  utf8proc_uint8_t* mapped = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
                        &mapped, static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n < 0) return false;
  std::string r(reinterpret_cast<char*>(mapped), static_cast<size_t>(n));
  free(mapped);
  cps.clear();
  return decode_utf8(r, cps);
}

void strip_accents(std::vector<int32_t>& cps) {
  normalize_form(cps, UTF8PROC_DECOMPOSE);
  cps.erase(std::remove_if(cps.begin(), cps.end(), [](int32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }),
            cps.end());
}

// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one U+FFFD.
std::string utf8_lossy(const std::string& bytes) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    unsigned char b = p[i];
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    } else if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b >= 0xE0 && b <= 0xEF) {
      need = 2;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    size_t j = 1;
    for (; j <= need && i + j < n; ++j) {
      unsigned char c = p[i + j];
      if (c < (j == 1 ? lo : 0x80) || c > (j == 1 ? hi : 0xBF)) break;
    }
    if (j == need + 1) {
      out.append(bytes, i, need + 1);
      i += need + 1;
    } else {
      out += "\xEF\xBF\xBD";
      i += j;
    }
  }
  return out;
}

Failure check_utf8(const std::string& text) {
  size_t bad = 0;
  std::vector<int32_t> probe;
  if (!decode_utf8(text, probe, &bad)) return {2, "the input is not valid UTF-8 (byte " + std::to_string(bad) + ")"};
  return {};
}

// prefix + body + suffix, the body cut so that the whole fits max_length (0: no limit), as `tokenizers`
// truncates when special tokens are added.
std::vector<int64_t> assemble(const std::vector<int64_t>& prefix, std::vector<int64_t> body,
                              const std::vector<int64_t>& suffix, size_t max_length) {
  size_t specials = prefix.size() + suffix.size();
  if (max_length > 0 && body.size() + specials > max_length)
    body.resize(max_length > specials ? max_length - specials : 0);
  std::vector<int64_t> ids = prefix;
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), suffix.begin(), suffix.end());
  return ids;
}

// GPT-2's reversible map from bytes to printable characters.
struct ByteMap {
  int32_t to_char[256];
  std::unordered_map<int32_t, uint8_t> to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? b : 256 + n++;
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// ---- a compiled PCRE2 pattern (Split pre-tokenizers and GPT-2's ByteLevel regex) ------------------------
class Regex {
 public:
  Regex(const std::string& pattern, bool literal, std::string& error) {
    int code;
    PCRE2_SIZE offset;
    uint32_t flags = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    re_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(), flags, &code, &offset, nullptr);
    if (!re_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(code, msg, sizeof msg);
      error = "pattern " + pattern + ": " + reinterpret_cast<char*>(msg);
      return;
    }
    data_ = pcre2_match_data_create_from_pattern(re_, nullptr);
  }
  ~Regex() {
    if (data_) pcre2_match_data_free(data_);
    if (re_) pcre2_code_free(re_);
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Non-empty matches as byte ranges, left to right.
  std::vector<std::pair<size_t, size_t>> find_all(const std::string& s) const {
    std::vector<std::pair<size_t, size_t>> out;
    size_t at = 0;
    while (at <= s.size()) {
      int rc = pcre2_match(re_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), at, 0, data_, nullptr);
      if (rc < 0) break;
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
      if (ov[1] > ov[0]) {
        out.emplace_back(ov[0], ov[1]);
        at = ov[1];
      } else {  // an empty match: step over one character
        at = ov[0] + 1;
        while (at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) ++at;
      }
    }
    return out;
  }

 private:
  pcre2_code* re_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// `tokenizers`' SplitDelimiterBehavior: what a Split pre-tokenizer does with the matches it cuts at.
enum class Behavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior behavior_of(const std::string& name) {
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "Removed") return Behavior::Removed;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  return Behavior::Contiguous;
}

// Splits s at the regex's matches the way `tokenizers`' SplitDelimiterBehavior does.
std::vector<std::string> split_by(const Regex& re, const std::string& s, Behavior behavior, bool invert) {
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> parts;  // (range, is delimiter)
  size_t prev = 0;
  for (auto [a, b] : re.find_all(s)) {
    if (a > prev) parts.push_back({{prev, a}, invert});
    parts.push_back({{a, b}, !invert});
    prev = b;
  }
  if (prev < s.size()) parts.push_back({{prev, s.size()}, invert});
  std::vector<std::pair<size_t, size_t>> out;
  if (behavior == Behavior::Isolated) {
    for (auto& p : parts) out.push_back(p.first);
  } else if (behavior == Behavior::Removed) {
    for (auto& p : parts) if (!p.second) out.push_back(p.first);
  } else if (behavior == Behavior::MergedWithPrevious) {
    for (auto& p : parts) {
      if (p.second && !out.empty()) out.back().second = p.first.second;
      else out.push_back(p.first);
    }
  } else if (behavior == Behavior::MergedWithNext) {
    bool carry = false;
    for (auto& p : parts) {
      if (carry) out.back().second = p.first.second;
      else out.push_back(p.first);
      carry = p.second;
    }
  } else {  // Contiguous
    bool last_delim = false;
    for (auto& p : parts) {
      if (p.second && last_delim) out.back().second = p.first.second;
      else out.push_back(p.first);
      last_delim = p.second;
    }
  }
  std::vector<std::string> pieces;
  for (auto [a, b] : out) if (b > a) pieces.push_back(s.substr(a, b - a));
  return pieces;
}

// ---- Hugging Face tokenizer.json ----------------------------------------------------------------------
struct AddedToken {
  std::string content;
  int64_t id;
  bool special, lstrip, rstrip;
};

class HfTokenizer : public Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> load(const json& j, std::string& error);

  Failure encode(const std::string& text, bool add_special, size_t max_length,
                 std::vector<int64_t>& ids) const override {
    if (Failure f = check_utf8(text)) return f;
    std::vector<int64_t> body;
    for (const auto& [segment, added] : split_added(text)) {
      if (added >= 0) {
        body.push_back(added);
        continue;
      }
      std::vector<int32_t> cps;
      decode_utf8(segment, cps);
      normalize(cps);
      for (const auto& word : pre_tokenize(to_utf8(cps))) model(word, body);
    }
    std::vector<int64_t> prefix, suffix;
    if (add_special) {
      bool in_prefix = true;
      for (const auto& item : template_) {
        if (item.empty()) {
          in_prefix = false;
          continue;
        }
        auto& dst = in_prefix ? prefix : suffix;
        dst.insert(dst.end(), item.begin(), item.end());
      }
    }
    ids = assemble(prefix, std::move(body), suffix, max_length);
    return {};
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<std::string> tokens;
    for (int64_t id : ids) {
      auto it = id_to_token_.find(id);
      if (it == id_to_token_.end() || special_ids_.count(id)) continue;
      tokens.push_back(it->second);
    }
    if (decoder_ == Decoder::WordPiece) {
      std::string out;
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string t = tokens[i];
        if (i != 0) {
          if (t.rfind(prefix_, 0) == 0) t = t.substr(prefix_.size());
          else t = " " + t;
        }
        if (cleanup_) t = wordpiece_cleanup(t);
        out += t;
      }
      return out;
    }
    if (decoder_ == Decoder::ByteLevel) {
      std::string bytes;
      for (const auto& t : tokens) {
        std::vector<int32_t> cps;
        decode_utf8(t, cps);
        std::string mapped;
        bool all = true;
        for (int32_t c : cps) {
          auto b = byte_map().to_byte.find(c);
          if (b == byte_map().to_byte.end()) {
            all = false;
            break;
          }
          mapped.push_back(static_cast<char>(b->second));
        }
        bytes += all ? mapped : t;
      }
      return utf8_lossy(bytes);
    }
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
  }

  std::optional<int64_t> token_id(const std::string& token) const override {
    for (const auto& a : added_) if (a.content == token) return a.id;
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }

 private:
  // The components of a tokenizer.json, each read once at load into one of the kinds this runner implements.
  enum class Model { WordPiece, Bpe };
  enum class Decoder { None, WordPiece, ByteLevel, Other };
  enum class NormKind { Bert, Lowercase, StripAccents, Nfc, Nfd, Nfkc, Nfkd };
  enum class PreKind { Bert, WhitespaceSplit, Split, ByteLevel };
  struct Normalizer {
    NormKind kind;
    bool clean_text = false, chinese = false, strip_accents = false, lowercase = false;
  };
  struct PreTokenizer {
    PreKind kind;
    Behavior behavior = Behavior::Isolated;
    bool invert = false, add_prefix_space = false, use_regex = true;
    std::shared_ptr<Regex> regex;
  };

  static std::string wordpiece_cleanup(std::string s) {
    static const std::pair<const char*, const char*> rules[] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
        {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (auto [from, to] : rules) {
      std::string f = from, t = to;
      for (size_t pos = s.find(f); pos != std::string::npos; pos = s.find(f, pos + t.size())) s.replace(pos, f.size(), t);
    }
    return s;
  }

  // The text cut at added tokens (leftmost, longest first); -1 marks a segment that is not one.
  std::vector<std::pair<std::string, int64_t>> split_added(const std::string& text) const {
    std::vector<std::pair<std::string, int64_t>> out;
    size_t start = 0, i = 0;
    while (i < text.size()) {
      const AddedToken* best = nullptr;
      for (const auto& a : added_)
        if (!a.content.empty() && text.compare(i, a.content.size(), a.content) == 0 &&
            (!best || a.content.size() > best->content.size()))
          best = &a;
      if (!best) {
        ++i;
        continue;
      }
      size_t seg_end = i, next = i + best->content.size();
      if (best->lstrip)
        while (seg_end > start && is_whitespace(static_cast<unsigned char>(text[seg_end - 1]))) --seg_end;
      if (best->rstrip)
        while (next < text.size() && is_whitespace(static_cast<unsigned char>(text[next]))) ++next;
      if (seg_end > start) out.emplace_back(text.substr(start, seg_end - start), -1);
      out.emplace_back(best->content, best->id);
      start = i = next;
    }
    if (start < text.size()) out.emplace_back(text.substr(start), -1);
    return out;
  }

  void normalize(std::vector<int32_t>& cps) const {
    for (const auto& n : normalizers_) {
      if (n.kind == NormKind::Bert) {
        std::vector<int32_t> out;
        for (int32_t c : cps) {
          if (n.clean_text) {
            if (c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && is_other(c))) continue;
            if (is_whitespace(c)) c = ' ';
          }
          if (n.chinese && is_chinese(c)) {
            out.push_back(' ');
            out.push_back(c);
            out.push_back(' ');
          } else {
            out.push_back(c);
          }
        }
        cps.swap(out);
        if (n.strip_accents) strip_accents(cps);
        if (n.lowercase) lowercase(cps);
      } else if (n.kind == NormKind::Lowercase) {
        lowercase(cps);
      } else if (n.kind == NormKind::StripAccents) {
        cps.erase(std::remove_if(cps.begin(), cps.end(), [](int32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }),
                  cps.end());
      } else if (n.kind == NormKind::Nfc) {
        normalize_form(cps, UTF8PROC_COMPOSE);
      } else if (n.kind == NormKind::Nfd) {
        normalize_form(cps, UTF8PROC_DECOMPOSE);
      } else if (n.kind == NormKind::Nfkc) {
        normalize_form(cps, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
      } else if (n.kind == NormKind::Nfkd) {
        normalize_form(cps, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
      }
    }
  }

  std::vector<std::string> pre_tokenize(const std::string& text) const {
    std::vector<std::string> pieces{text};
    for (const auto& p : pre_tokenizers_) {
      std::vector<std::string> next;
      for (const auto& piece : pieces) {
        if (p.kind == PreKind::Bert || p.kind == PreKind::WhitespaceSplit) {
          std::vector<int32_t> cps;
          decode_utf8(piece, cps);
          std::string word;
          for (int32_t c : cps) {
            if (is_whitespace(c)) {
              if (!word.empty()) next.push_back(word);
              word.clear();
            } else if (p.kind == PreKind::Bert && is_punctuation(c)) {
              if (!word.empty()) next.push_back(word);
              word.clear();
              next.push_back(to_utf8({c}));
            } else {
              append_utf8(word, c);
            }
          }
          if (!word.empty()) next.push_back(word);
        } else if (p.kind == PreKind::Split) {
          for (auto& s : split_by(*p.regex, piece, p.behavior, p.invert)) next.push_back(s);
        } else if (p.kind == PreKind::ByteLevel) {
          std::string s = piece;
          if (p.add_prefix_space && (s.empty() || s[0] != ' ')) s = " " + s;
          std::vector<std::string> split = p.use_regex ? split_by(*p.regex, s, Behavior::Isolated, false)
                                                       : std::vector<std::string>{s};
          for (const auto& w : split) {
            std::string mapped;
            for (unsigned char b : w) append_utf8(mapped, byte_map().to_char[b]);
            next.push_back(mapped);
          }
        }
      }
      pieces.swap(next);
    }
    return pieces;
  }

  void model(const std::string& word, std::vector<int64_t>& ids) const {
    std::vector<int32_t> cps;
    decode_utf8(word, cps);
    if (cps.empty()) return;
    if (model_ == Model::WordPiece) wordpiece(cps, ids);
    else bpe(word, cps, ids);
  }

  // The longest vocabulary entry from the start, then from where it ended (with the subword prefix); a word
  // with a piece in no entry is [UNK] whole.
  void wordpiece(const std::vector<int32_t>& cps, std::vector<int64_t>& ids) const {
    if (cps.size() > max_chars_) {
      ids.push_back(unk_id_);
      return;
    }
    std::vector<int64_t> pieces;
    size_t start = 0;
    while (start < cps.size()) {
      size_t end = cps.size();
      int64_t found = -1;
      while (start < end) {
        std::string sub = (start > 0 ? prefix_ : "") + to_utf8(cps, start, end);
        auto it = vocab_.find(sub);
        if (it != vocab_.end()) {
          found = it->second;
          break;
        }
        --end;
      }
      if (found < 0) {
        ids.push_back(unk_id_);
        return;
      }
      pieces.push_back(found);
      start = end;
    }
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }

  // Merge the adjacent pair with the lowest rank (leftmost on ties) until none is left.
  void bpe(const std::string& word, const std::vector<int32_t>& cps, std::vector<int64_t>& ids) const {
    if (ignore_merges_) {
      auto it = vocab_.find(word);
      if (it != vocab_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    std::vector<std::string> syms;
    for (int32_t c : cps) syms.push_back(to_utf8({c}));
    while (syms.size() > 1) {
      int best_rank = INT_MAX;
      size_t best = 0;
      for (size_t i = 0; i + 1 < syms.size(); ++i) {
        auto it = merges_.find(syms[i] + '\x01' + syms[i + 1]);
        if (it != merges_.end() && it->second < best_rank) {
          best_rank = it->second;
          best = i;
        }
      }
      if (best_rank == INT_MAX) break;
      syms[best] += syms[best + 1];
      syms.erase(syms.begin() + static_cast<long>(best) + 1);
    }
    for (const auto& s : syms) {
      auto it = vocab_.find(s);
      if (it != vocab_.end()) ids.push_back(it->second);
      else if (unk_id_ >= 0) ids.push_back(unk_id_);
    }
  }

  Model model_ = Model::WordPiece;
  Decoder decoder_ = Decoder::None;
  std::string prefix_ = "##";
  bool cleanup_ = true, ignore_merges_ = false;
  size_t max_chars_ = 100;
  int64_t unk_id_ = -1;
  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<int64_t, std::string> id_to_token_;
  std::unordered_map<std::string, int> merges_;
  std::vector<AddedToken> added_;
  std::unordered_map<int64_t, bool> special_ids_;
  std::vector<Normalizer> normalizers_;
  std::vector<PreTokenizer> pre_tokenizers_;
  std::vector<std::vector<int64_t>> template_;  // special ids before and after an empty entry (the text)
};

std::string str(const json& j, const char* key, const std::string& fallback = "") {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}
bool flag(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::unique_ptr<Tokenizer> HfTokenizer::load(const json& j, std::string& error) {
  auto t = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  const json& m = j.at("model");
  const std::string model = str(m, "type");
  if (model != "WordPiece" && model != "BPE") {
    error = "model type " + model + " (this runner reads WordPiece and byte-level BPE tokenizer.json files)";
    return nullptr;
  }
  t->model_ = model == "WordPiece" ? Model::WordPiece : Model::Bpe;
  for (auto& [token, id] : m.at("vocab").items()) {
    t->vocab_[token] = id.get<int64_t>();
    t->id_to_token_[id.get<int64_t>()] = token;
  }
  if (t->model_ == Model::WordPiece) {
    t->prefix_ = str(m, "continuing_subword_prefix", "##");
    t->max_chars_ = m.value("max_input_chars_per_word", 100);
  } else {
    if (flag(m, "byte_fallback", false) || !str(m, "continuing_subword_prefix").empty() ||
        !str(m, "end_of_word_suffix").empty()) {
      error = "a BPE model with byte_fallback or subword affixes (SentencePiece-style BPE: ship the .model file)";
      return nullptr;
    }
    t->ignore_merges_ = flag(m, "ignore_merges", false);
    int rank = 0;
    for (const auto& merge : m.at("merges")) {
      std::string a, b;
      if (merge.is_string()) {
        std::string s = merge.get<std::string>();
        auto sp = s.find(' ');
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        a = merge.at(0).get<std::string>();
        b = merge.at(1).get<std::string>();
      }
      t->merges_.emplace(a + '\x01' + b, rank++);
    }
  }
  std::string unk = str(m, "unk_token");
  if (!unk.empty() && t->vocab_.count(unk)) t->unk_id_ = t->vocab_[unk];
  if (j.contains("added_tokens"))
    for (const auto& a : j.at("added_tokens")) {
      AddedToken tok{a.at("content"), a.at("id"), flag(a, "special", false), flag(a, "lstrip", false),
                     flag(a, "rstrip", false)};
      t->added_.push_back(tok);
      t->id_to_token_[tok.id] = tok.content;
      if (tok.special) t->special_ids_[tok.id] = true;
    }
  // Normalizers and pre-tokenizers, flattened out of Sequences.
  std::vector<json> norms, pres, posts;
  auto flatten = [](const json& node, const char* list, std::vector<json>& into, auto& self) -> void {
    if (node.is_null()) return;
    if (str(node, "type") == "Sequence") {
      for (const auto& n : node.at(list)) self(n, list, into, self);
    } else {
      into.push_back(node);
    }
  };
  flatten(j.value("normalizer", json()), "normalizers", norms, flatten);
  flatten(j.value("pre_tokenizer", json()), "pretokenizers", pres, flatten);
  flatten(j.value("post_processor", json()), "processors", posts, flatten);
  static const std::unordered_map<std::string, NormKind> normalizer_kinds = {
      {"BertNormalizer", NormKind::Bert}, {"Lowercase", NormKind::Lowercase}, {"StripAccents", NormKind::StripAccents},
      {"NFC", NormKind::Nfc}, {"NFD", NormKind::Nfd}, {"NFKC", NormKind::Nfkc}, {"NFKD", NormKind::Nfkd}};
  for (const auto& n : norms) {
    const std::string type = str(n, "type");
    auto kind = normalizer_kinds.find(type);
    if (kind == normalizer_kinds.end()) {
      error = "normalizer " + type;
      return nullptr;
    }
    Normalizer x{kind->second};
    if (x.kind == NormKind::Bert) {
      x.clean_text = flag(n, "clean_text", true);
      x.chinese = flag(n, "handle_chinese_chars", true);
      x.lowercase = flag(n, "lowercase", true);
      x.strip_accents = flag(n, "strip_accents", x.lowercase);
    }
    t->normalizers_.push_back(x);
  }
  static const std::unordered_map<std::string, PreKind> pre_tokenizer_kinds = {
      {"BertPreTokenizer", PreKind::Bert}, {"WhitespaceSplit", PreKind::WhitespaceSplit}, {"Split", PreKind::Split},
      {"ByteLevel", PreKind::ByteLevel}};
  for (const auto& p : pres) {
    const std::string type = str(p, "type");
    auto kind = pre_tokenizer_kinds.find(type);
    if (kind == pre_tokenizer_kinds.end()) {
      error = "pre-tokenizer " + type;
      return nullptr;
    }
    PreTokenizer x{kind->second};
    if (x.kind == PreKind::Split) {
      const json& pat = p.at("pattern");
      bool literal = pat.contains("String");
      std::string re_error;
      x.regex = std::make_shared<Regex>(literal ? pat.at("String").get<std::string>() : pat.at("Regex").get<std::string>(),
                                        literal, re_error);
      if (!re_error.empty()) {
        error = "Split " + re_error;
        return nullptr;
      }
      x.behavior = behavior_of(str(p, "behavior", "Isolated"));
      x.invert = flag(p, "invert", false);
    } else if (x.kind == PreKind::ByteLevel) {
      x.add_prefix_space = flag(p, "add_prefix_space", false);
      x.use_regex = flag(p, "use_regex", true);
      std::string re_error;
      if (x.use_regex) x.regex = std::make_shared<Regex>(kGpt2Pattern, false, re_error);
    }
    t->pre_tokenizers_.push_back(x);
  }
  for (const auto& p : posts) {
    std::string type = str(p, "type");
    auto ids_of = [&](const std::string& name) {
      std::vector<int64_t> ids;
      if (p.contains("special_tokens") && p.at("special_tokens").contains(name))
        for (const auto& id : p.at("special_tokens").at(name).at("ids")) ids.push_back(id.get<int64_t>());
      return ids;
    };
    if (type == "TemplateProcessing") {
      t->template_.clear();
      for (const auto& item : p.at("single")) {
        if (item.contains("Sequence")) t->template_.push_back({});
        else t->template_.push_back(ids_of(item.at("SpecialToken").at("id").get<std::string>()));
      }
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
      t->template_ = {{p.at("cls").at(1).get<int64_t>()}, {}, {p.at("sep").at(1).get<int64_t>()}};
    } else if (type != "ByteLevel") {
      error = "post-processor " + type;
      return nullptr;
    }
  }
  if (std::none_of(t->template_.begin(), t->template_.end(), [](const auto& v) { return v.empty(); }))
    t->template_.insert(t->template_.begin(), std::vector<int64_t>{});  // no template: the text alone
  const json dec = j.value("decoder", json());
  const std::string decoder = dec.is_null() ? "" : str(dec, "type");
  t->decoder_ = decoder.empty() ? Decoder::None
                : decoder == "WordPiece" ? Decoder::WordPiece
                : decoder == "ByteLevel" ? Decoder::ByteLevel : Decoder::Other;
  if (t->decoder_ == Decoder::WordPiece) {
    t->prefix_ = str(dec, "prefix", t->prefix_);
    t->cleanup_ = flag(dec, "cleanup", true);
  }
  t->kind_ = t->model_ == Model::WordPiece ? "wordpiece" : "bpe";
  return t;
}

// ---- SentencePiece ------------------------------------------------------------------------------------
class SpTokenizer : public Tokenizer {
 public:
  explicit SpTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp) : sp_(std::move(sp)) {
    kind_ = "sentencepiece";
  }
  Failure encode(const std::string& text, bool add_special, size_t max_length,
                 std::vector<int64_t>& ids) const override {
    if (Failure f = check_utf8(text)) return f;
    std::vector<int> pieces;
    auto status = sp_->Encode(text, &pieces);
    if (!status.ok()) return {1, "sentencepiece: " + status.ToString()};
    std::vector<int64_t> prefix;
    if (add_special && sp_->bos_id() >= 0) prefix.push_back(sp_->bos_id());
    ids = assemble(prefix, std::vector<int64_t>(pieces.begin(), pieces.end()), {}, max_length);
    return {};
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<int> pieces(ids.begin(), ids.end());
    std::string out;
    if (!sp_->Decode(pieces, &out).ok()) return "";
    return out;
  }
  std::optional<int64_t> token_id(const std::string& token) const override {
    int id = sp_->PieceToId(token);
    if (id == sp_->unk_id() && sp_->IdToPiece(id) != token) return std::nullopt;
    return id;
  }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::open(const std::string& path, Failure& failure) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    failure = {2, "tokenizer " + path + ": cannot be read"};
    return nullptr;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string bytes = buf.str();
  if (bytes.empty()) {
    failure = {2, "tokenizer " + path + ": the file is empty"};
    return nullptr;
  }
  size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || bytes[first] != '{') {  // not JSON: a SentencePiece model (protobuf)
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    auto status = sp->LoadFromSerializedProto(bytes);
    if (!status.ok()) {
      failure = {2, "tokenizer " + path + ": neither a tokenizer.json nor a SentencePiece model (" +
                        status.ToString() + ")"};
      return nullptr;
    }
    return std::make_unique<SpTokenizer>(std::move(sp));
  }
  json j = json::parse(bytes, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model")) {
    failure = {2, "tokenizer " + path + ": not a Hugging Face tokenizer.json (corrupted?)"};
    return nullptr;
  }
  std::string error;
  std::unique_ptr<Tokenizer> t;
  try {
    t = HfTokenizer::load(j, error);
  } catch (const json::exception& e) {
    error = std::string("malformed (") + e.what() + ")";
  }
  if (!t) failure = {2, "tokenizer " + path + ": unsupported by the native runtime: " + error};
  return t;
}

}  // namespace deployc
