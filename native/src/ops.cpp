#include "ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <utility>

#include "preprocess.h"

namespace deployc {

using nlohmann::json;

std::string as_text(const Value& v) {
  if (auto s = std::get_if<std::string>(&v)) return *s;
  if (auto c = std::get_if<std::vector<Chunk>>(&v)) {
    std::string out;
    for (size_t i = 0; i < c->size(); ++i) out += (i ? "\n\n" : "") + (*c)[i].text;
    return out;
  }
  return "";
}

json to_json(const Value& v) {
  if (auto s = std::get_if<std::string>(&v)) return *s;
  if (auto c = std::get_if<std::vector<Chunk>>(&v)) {
    json out = json::array();
    for (const auto& ch : *c) out.push_back({{"id", ch.id}, {"source", ch.source}, {"text", ch.text}, {"score", ch.score}});
    return out;
  }
  const auto& a = std::get<Array>(v);
  json data = json::array();
  for (size_t i = 0; i < a.numel(); ++i) {
    if (a.dtype == "float32") data.push_back(a.as<float>()[i]);
    else if (a.dtype == "int64") data.push_back(a.as<int64_t>()[i]);
    else data.push_back(a.as<int32_t>()[i]);
  }
  return {{"dtype", a.dtype}, {"shape", a.shape}, {"data", data}};
}

const Tokenizer* OpContext::tokenizer(const std::string& file, Failure& failure) {
  auto found = tokenizers_.find(file);
  if (found != tokenizers_.end()) return found->second.get();
  auto tk = Tokenizer::open(root_ + "/" + file, failure);
  if (!tk) return nullptr;
  return (tokenizers_[file] = std::move(tk)).get();
}

namespace {
Failure search(const std::string& root, const json& params, const Array& query, Values& out) {
  std::ifstream in(root + "/" + params.at("index").get<std::string>());
  json meta = json::parse(in, nullptr, false);
  if (meta.is_discarded()) return {1, "index " + params.at("index").get<std::string>() + " is unreadable"};
  const int64_t count = meta.at("count"), dim = meta.at("dim");
  if (query.dtype != "float32" || static_cast<int64_t>(query.numel()) != dim)
    return {2, "vector_search: the query has " + std::to_string(query.numel()) + " values, the index " +
                   std::to_string(dim) + " dimensions"};
  std::string folder = params.at("index").get<std::string>();
  folder = folder.substr(0, folder.find_last_of('/') + 1);
  std::ifstream vin(root + "/" + folder + meta.at("vectors").get<std::string>(), std::ios::binary);
  std::vector<float> vectors(static_cast<size_t>(count * dim));
  vin.read(reinterpret_cast<char*>(vectors.data()), static_cast<std::streamsize>(vectors.size() * sizeof(float)));
  if (!vin) return {1, "index vectors are truncated"};
  const float* q = query.as<float>();
  double qn = 0;
  for (int64_t j = 0; j < dim; ++j) qn += static_cast<double>(q[j]) * q[j];
  std::vector<double> scores(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    double dot = 0, vn = 0;
    for (int64_t j = 0; j < dim; ++j) {
      double x = vectors[static_cast<size_t>(i * dim + j)];
      dot += x * q[j];
      vn += x * x;
    }
    scores[static_cast<size_t>(i)] = dot / (std::sqrt(vn) * std::sqrt(qn) + 1e-12);
  }
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  const int64_t k = std::min<int64_t>(params.at("top_k").get<int64_t>(), count);
  std::vector<Chunk> chunks;
  Array top{"float32", {k}, std::vector<uint8_t>(static_cast<size_t>(k) * 4)};
  for (int64_t i = 0; i < k; ++i) {
    const json& c = meta.at("chunks").at(static_cast<size_t>(order[i]));
    chunks.push_back(Chunk{c.at("id"), c.at("source"), c.at("text"), scores[static_cast<size_t>(order[i])]});
    reinterpret_cast<float*>(top.data.data())[i] = static_cast<float>(scores[static_cast<size_t>(order[i])]);
  }
  out["text"] = as_text(chunks);
  out["chunks"] = chunks;
  out["scores"] = top;
  return {};
}

// Scores of the one embedding `a` against every row of `b` (float64 sums) and the rows best first.
void similarity(const Array& a, const Array& b, const std::string& metric, int64_t top_k,
                Values& out) {
  const size_t dim = a.numel(), rows = b.numel() / dim;
  const float* q = a.as<float>();
  const float* m = b.as<float>();
  double qn = 0;
  for (size_t j = 0; j < dim; ++j) qn += static_cast<double>(q[j]) * q[j];
  std::vector<double> scores(rows);
  for (size_t i = 0; i < rows; ++i) {
    double dot = 0, n = 0;
    for (size_t j = 0; j < dim; ++j) {
      dot += static_cast<double>(m[i * dim + j]) * q[j];
      n += static_cast<double>(m[i * dim + j]) * m[i * dim + j];
    }
    scores[i] = metric == "cosine" ? dot / (std::sqrt(n) * std::sqrt(qn) + 1e-12) : dot;
  }
  std::vector<int64_t> order(rows);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return scores[x] > scores[y]; });
  order.resize(std::min<size_t>(rows, static_cast<size_t>(top_k)));
  Array s{"float32", {static_cast<int64_t>(rows)}, std::vector<uint8_t>(rows * 4)};
  for (size_t i = 0; i < rows; ++i) reinterpret_cast<float*>(s.data.data())[i] = static_cast<float>(scores[i]);
  Array t{"int64", {static_cast<int64_t>(order.size())}, std::vector<uint8_t>(order.size() * 8)};
  std::memcpy(t.data.data(), order.data(), t.data.size());
  out["scores"] = s;
  out["top"] = t;
}

Array int64_row(const std::vector<int64_t>& ids, bool flat = false) {
  Array a{"int64", flat ? std::vector<int64_t>{static_cast<int64_t>(ids.size())}
                        : std::vector<int64_t>{1, static_cast<int64_t>(ids.size())}, {}};
  a.data.resize(ids.size() * sizeof(int64_t));
  std::memcpy(a.data.data(), ids.data(), a.data.size());
  return a;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The next token from logits, as deployc run chooses it: argmax (first on ties) at temperature 0;
// else softmax at the temperature, the smallest top-p set in descending order, one draw from `rng`.
// (Sampled streams differ from Python's: numpy's generator is not reproduced here.)
int64_t choose(const Array& logits, double temperature, double top_p, std::mt19937_64& rng) {
  const float* x = logits.as<float>();
  const size_t n = logits.numel();
  if (temperature <= 0.0) return static_cast<int64_t>(std::max_element(x, x + n) - x);
  double top = *std::max_element(x, x + n), total = 0;
  std::vector<double> probs(n);
  for (size_t i = 0; i < n; ++i) total += probs[i] = std::exp((x[i] - top) / temperature);
  for (auto& p : probs) p /= total;
  std::vector<size_t> ranked(n);
  std::iota(ranked.begin(), ranked.end(), 0);
  std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) { return probs[a] > probs[b]; });
  size_t keep = 0;
  double cumulative = 0;
  while (keep < n) {
    cumulative += probs[ranked[keep++]];
    if (cumulative >= top_p) break;
  }
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += probs[ranked[i]];
  double draw = std::uniform_real_distribution<double>(0.0, mass)(rng);
  for (size_t i = 0; i < keep; ++i) {
    draw -= probs[ranked[i]];
    if (draw <= 0) return static_cast<int64_t>(ranked[i]);
  }
  return static_cast<int64_t>(ranked[keep - 1]);
}

// How many of the prompt's first and last tokens are its frame: bos and the chat prefix's tokens where the
// prompt starts with them, the suffix's where it ends with them (generation.py's frame_tokens).
std::pair<size_t, size_t> frame_tokens(const std::vector<int64_t>& ids, const std::vector<int64_t>& bos,
                                       const std::vector<int64_t>& prefix, const std::vector<int64_t>& suffix) {
  std::vector<int64_t> head(bos);
  head.insert(head.end(), prefix.begin(), prefix.end());
  const bool starts = ids.size() >= head.size() && std::equal(head.begin(), head.end(), ids.begin());
  const bool ends = !suffix.empty() && ids.size() >= suffix.size() &&
                    std::equal(suffix.rbegin(), suffix.rend(), ids.rbegin());
  return {starts ? head.size() : bos.size(), ends ? suffix.size() : 0};
}

// A prompt that would not leave room for the answer keeps its frame (bos, the chat template's prefix and
// suffix: what the model was tuned on) and the message's last tokens; when the frame alone leaves no room,
// the last tokens (generation.py's fit_prompt, as deployc run does).
void fit_prompt(std::vector<int64_t>& ids, size_t room, std::pair<size_t, size_t> frame) {
  if (ids.size() <= room) return;
  const auto [head, tail] = frame;
  const size_t cut_from = head + tail < room ? head : 0;
  ids.erase(ids.begin() + static_cast<long>(cut_from), ids.end() - static_cast<long>(room - cut_from));
}

// Prefill the prompt in one call, then one call per new token: the loop of deployc run (generation.py).
Failure generate(Bundle& bundle, const StageSpec& stage, const json& params, const Tokenizer& tk,
                 const std::string& prompt, const RunOptions& options, Values& out, json& stats) {
  auto start = std::chrono::steady_clock::now();
  std::vector<int64_t> ids;
  // The model's chat template, rendered at build time into what goes before and after the user's message.
  const std::string prefix = params.value("chat_prefix", std::string());
  const std::string suffix = params.value("chat_suffix", std::string());
  std::vector<int64_t> bos, prefix_ids, suffix_ids;
  for (auto [text, into] : {std::pair{prefix + prompt + suffix, &ids}, {prefix, &prefix_ids}, {suffix, &suffix_ids}})
    if (Failure f = text.empty() ? Failure{} : tk.encode(text, false, 0, *into))
      return {f.exit_code, "stage " + stage.name + ": " + f.message};
  if (params.contains("bos_id")) {
    bos.push_back(params.at("bos_id").get<int64_t>());
    ids.insert(ids.begin(), bos[0]);
  }
  const int64_t max_new = params.at("max_new_tokens"), max_seq = params.at("max_seq_len");
  const size_t room = static_cast<size_t>(max_new < max_seq ? max_seq - max_new : 1);
  fit_prompt(ids, room, frame_tokens(ids, bos, prefix_ids, suffix_ids));
  std::vector<int64_t> eos = params.value("eos_ids", std::vector<int64_t>{});
  std::vector<std::string> stops = params.value("stop", std::vector<std::string>{});
  const double temperature = params.value("temperature", 0.0), top_p = params.value("top_p", 1.0);
  std::mt19937_64 rng(params.value("seed", 0));
  const size_t prompt_tokens = ids.size();
  double first_token_ms = 0;
  std::vector<Array> outputs;
  auto step = [&](const std::vector<int64_t>& tokens, int64_t first_pos) -> Failure {
    std::vector<int64_t> pos(tokens.size());
    std::iota(pos.begin(), pos.end(), first_pos);
    return bundle.run(stage.program, stage.method, {int64_row(tokens), int64_row(pos, true)}, outputs);
  };
  const auto prefill_start = std::chrono::steady_clock::now();
  if (Failure f = step(ids, 0)) return f;
  const double prefill_ms = since(prefill_start);
  std::vector<int64_t> generated;
  std::string streamed;
  int64_t pos = static_cast<int64_t>(ids.size());
  double decode_ms = 0;
  bool cancelled = false;
  while (static_cast<int64_t>(generated.size()) < max_new && pos < max_seq) {
    int64_t token = choose(outputs.at(0), temperature, top_p, rng);
    if (generated.empty()) first_token_ms = since(start);
    if (std::find(eos.begin(), eos.end(), token) != eos.end()) break;
    generated.push_back(token);
    std::string text = tk.decode(generated);
    if (options.on_text && text.size() > streamed.size() && text.compare(0, streamed.size(), streamed) == 0) {
      options.on_text(text.substr(streamed.size()));
      streamed = text;
    }
    if (std::any_of(stops.begin(), stops.end(), [&](const std::string& s) { return text.find(s) != std::string::npos; }))
      break;
    if (options.cancelled && options.cancelled()) {
      cancelled = true;
      break;
    }
    auto t = std::chrono::steady_clock::now();
    if (Failure f = step({token}, pos)) return f;
    decode_ms += since(t);
    ++pos;
  }
  const double per_token_ms = generated.size() > 1 ? decode_ms / static_cast<double>(generated.size() - 1) : 0.0;
  stats = {{"prompt_tokens", prompt_tokens}, {"tokens", generated.size()}, {"first_token_ms", first_token_ms},
           {"per_token_ms", per_token_ms}, {"prefill_ms", prefill_ms},
           {"prefill_tokens_per_s", prefill_ms > 0 ? 1000.0 * static_cast<double>(prompt_tokens) / prefill_ms : 0.0},
           {"decode_tokens_per_s", per_token_ms > 0 ? 1000.0 / per_token_ms : 0.0}};
  if (cancelled) stats["cancelled"] = true;
  std::string text = tk.decode(generated);
  for (const auto& s : stops) text = text.substr(0, text.find(s));
  out["text"] = text;
  out["tokens"] = int64_row(generated);
  return {};
}

const ProgramSpec* program_of(const RuntimeConfig& config, const std::string& name) {
  for (const auto& c : config.programs) if (c.name == name) return &c;
  return nullptr;
}

Failure needs_bundle(const StageSpec& stage) {
  return {2, "stage " + stage.name + " (" + stage.op + "): calls a program, and no bundle is open"};
}

template <typename T>
const T* arg(Values& args, const std::string& port) {
  auto found = args.find(port);
  return found == args.end() ? nullptr : std::get_if<T>(&found->second);
}

// ---- the ops: one function each (the native side of deployc/pipeline/ops/<op>.py) ---------------------
Failure op_model(OpContext& ctx, const StageSpec& stage, const json&, Values& args, Values& out) {
  if (!ctx.bundle()) return needs_bundle(stage);
  const ProgramSpec* p = program_of(ctx.bundle()->config(), stage.program);
  const MethodSpec* m = p ? p->method(stage.method) : nullptr;
  if (!m) return {2, "stage " + stage.name + ": program " + stage.program + " has no method " + stage.method};
  std::vector<Array> inputs, outputs;
  for (const auto& t : m->inputs) {
    const Array* a = arg<Array>(args, t.name);
    if (!a) return {2, "stage " + stage.name + ": input " + t.name + " is not a tensor"};
    inputs.push_back(*a);
  }
  if (Failure f = ctx.bundle()->run(stage.program, stage.method, inputs, outputs)) return f;
  for (size_t i = 0; i < outputs.size() && i < m->outputs.size(); ++i) out[m->outputs[i].name] = outputs[i];
  return {};
}

Failure op_tokenize(OpContext& ctx, const StageSpec& stage, const json& params, Values& args, Values& out) {
  const std::string* text = arg<std::string>(args, "input");
  if (!text) return {2, "stage " + stage.name + ": input is not text"};
  Failure failure;
  const Tokenizer* tk = ctx.tokenizer(params.at("tokenizer"), failure);
  if (!tk) return {failure.exit_code, "stage " + stage.name + " (tokenize): " + failure.message};
  std::vector<int64_t> ids;
  if (Failure f = tk->encode(*text, true, params.value("max_length", 0), ids))
    return {f.exit_code, "stage " + stage.name + " (tokenize): " + f.message};
  std::vector<int64_t> mask(ids.size(), 1);
  if (size_t pad_to = params.value("pad_to", 0)) {  // a static-length program: pad and mask out
    ids.resize(std::min(ids.size(), pad_to));
    mask.resize(ids.size());
    ids.resize(pad_to, tk->pad_id());
    mask.resize(pad_to, 0);
  }
  out["input_ids"] = int64_row(ids);
  out["attention_mask"] = int64_row(mask);
  return {};
}

Failure op_vector_search(OpContext& ctx, const StageSpec& stage, const json& params, Values& args, Values& out) {
  const Array* q = arg<Array>(args, "query");
  if (!q) return {2, "stage " + stage.name + ": query is not a tensor"};
  return search(ctx.root(), params, *q, out);
}

bool identifier_char(char c, bool first) {
  return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (!first && c >= '0' && c <= '9');
}

// Each {name} with a value replaced by it, in one pass (inserted text is never scanned again); every other
// character, other braces included, stays as written.
Failure op_template(OpContext&, const StageSpec&, const json& params, Values& args, Values& out) {
  const std::string tpl = params.at("template");
  std::string text;
  for (size_t i = 0; i < tpl.size();) {
    size_t end = i + 1;
    while (tpl[i] == '{' && end < tpl.size() && identifier_char(tpl[end], end == i + 1)) ++end;
    auto value = tpl[i] == '{' && end < tpl.size() && tpl[end] == '}' && end > i + 1
                     ? args.find(tpl.substr(i + 1, end - i - 1)) : args.end();
    if (value != args.end()) {
      text += as_text(value->second);
      i = end + 1;
    } else {
      text += tpl[i++];
    }
  }
  out["text"] = text;
  return {};
}

Failure op_generate(OpContext& ctx, const StageSpec& stage, const json& params, Values& args, Values& out) {
  if (!ctx.bundle()) return needs_bundle(stage);
  Failure failure;
  const Tokenizer* tk = ctx.tokenizer(params.at("tokenizer"), failure);
  if (!tk) return {failure.exit_code, "stage " + stage.name + " (generate): " + failure.message};
  auto found = args.find("prompt");
  if (found == args.end()) return {2, "stage " + stage.name + ": no prompt"};
  return generate(*ctx.bundle(), stage, params, *tk, as_text(found->second), ctx.options(), out, ctx.figures);
}

// image and audio: a file input decoded into one tensor by the stage's steps (preprocess.h).
using Steps = Failure (*)(const std::string& bytes, const json& steps, Array& out);

Failure decode_file(const StageSpec& stage, const json& params, Values& args, Values& out, Steps steps,
                    const std::string& port) {
  const std::string* bytes = arg<std::string>(args, "input");
  if (!bytes) return {2, "stage " + stage.name + ": input is not a file"};
  Array a;
  if (Failure f = steps(*bytes, params.at("steps"), a))
    return {f.exit_code, "stage " + stage.name + " (" + stage.op + "): " + f.message};
  out[port] = a;
  return {};
}

Failure op_image(OpContext&, const StageSpec& stage, const json& params, Values& args, Values& out) {
  return decode_file(stage, params, args, out, image_steps, "pixels");
}

Failure op_audio(OpContext&, const StageSpec& stage, const json& params, Values& args, Values& out) {
  return decode_file(stage, params, args, out, audio_steps, "features");
}

Failure op_similarity(OpContext&, const StageSpec& stage, const json& params, Values& args, Values& out) {
  const Array* a = arg<Array>(args, "a");
  const Array* b = arg<Array>(args, "b");
  if (!a || !b || a->dtype != "float32" || b->dtype != "float32" || a->numel() == 0 || b->numel() % a->numel())
    return {2, "stage " + stage.name + ": a and b must be float32 embeddings of the same dimension"};
  similarity(*a, *b, params.value("metric", std::string("cosine")), params.value("top_k", 1), out);
  return {};
}
}  // namespace

const std::map<std::string, OpFunction>& op_table() {
  static const std::map<std::string, OpFunction> table = {
      {"model", op_model},   {"tokenize", op_tokenize}, {"vector_search", op_vector_search},
      {"template", op_template}, {"generate", op_generate}, {"image", op_image},
      {"audio", op_audio},   {"similarity", op_similarity},
  };
  return table;
}

}  // namespace deployc
