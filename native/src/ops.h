// The pipeline's ops, one function each, in one table keyed by the runtime config's op name: the native
// side of deployc/pipeline/ops/<op>.py. Adding an op is one function in ops.cpp and one line in its table.
// Conformance vectors (tests/conformance/) run every op here and in Python on the same inputs.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "bundle.h"
#include "failure.h"
#include "npy.h"
#include "tokenizer.h"

namespace deployc {

struct Chunk {
  int64_t id;
  std::string source, text;
  double score;
};
// What flows between stages: a tensor, text (or a file's bytes), or retrieved chunks.
using Value = std::variant<Array, std::string, std::vector<Chunk>>;
using Values = std::map<std::string, Value>;

std::string as_text(const Value& v);
nlohmann::json to_json(const Value& v);

struct RunOptions {
  std::string until;                                  // stop after this stage ("" runs them all)
  std::function<void(const std::string&)> on_text;    // generate: each new piece of text as it is decoded
  // generate: asked after each new token; true ends the generation there (the text so far is the answer,
  // its figures say "cancelled"). An app's stop button, or a listener that has read enough.
  std::function<bool()> cancelled;
};

// What an op may use: the folder its parameters' files are in (the bundle), the bundle's programs (none
// when a conformance vector runs outside a bundle), its tokenizers (each loaded once), and where it
// reports figures beside its outputs (a generate stage's token counts and times).
class OpContext {
 public:
  OpContext(std::string root, Bundle* bundle, RunOptions options)
      : root_(std::move(root)), bundle_(bundle), options_(std::move(options)) {}
  const std::string& root() const { return root_; }
  Bundle* bundle() const { return bundle_; }
  const RunOptions& options() const { return options_; }
  void set_options(RunOptions options) { options_ = std::move(options); }
  const Tokenizer* tokenizer(const std::string& file, Failure& failure);
  nlohmann::json figures = nlohmann::json::object();

 private:
  std::string root_;
  Bundle* bundle_;
  RunOptions options_;
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers_;  // by file
};

using OpFunction = Failure (*)(OpContext& ctx, const StageSpec& stage, const nlohmann::json& params, Values& args,
                               Values& out);
const std::map<std::string, OpFunction>& op_table();

}  // namespace deployc
