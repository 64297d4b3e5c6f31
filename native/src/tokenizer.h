// Native tokenization of a bundle's tokenizer asset, with the same ids as Python's `tokenizers`:
//   - Hugging Face tokenizer.json with a WordPiece model (BERT family: BertNormalizer, BertPreTokenizer);
//   - Hugging Face tokenizer.json with a byte-level BPE model (GPT-2, Llama-3, Qwen: ByteLevel, Split regex);
//   - SentencePiece .model files, through libsentencepiece.
// Anything else is refused at open time, naming the component this runner does not implement.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "failure.h"

namespace deployc {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  static std::unique_ptr<Tokenizer> open(const std::string& path, Failure& failure);

  // Token ids of UTF-8 text. add_special: the post-processor's tokens (e.g. [CLS] ... [SEP]).
  // max_length > 0 truncates the text's tokens so that the result, specials included, fits.
  virtual Failure encode(const std::string& text, bool add_special, size_t max_length,
                         std::vector<int64_t>& ids) const = 0;
  // Text of ids, special tokens skipped (as `tokenizers`' decode does by default).
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual std::optional<int64_t> token_id(const std::string& token) const = 0;
  // The id padding uses: [PAD], <pad> or <|pad|> when the vocabulary has one, else 0.
  int64_t pad_id() const;
  const std::string& kind() const { return kind_; }

 protected:
  std::string kind_;
};

}  // namespace deployc
