#include "pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <numeric>
#include <regex>
#include <variant>

namespace deployc {

using nlohmann::json;

namespace {
struct Chunk {
  int64_t id;
  std::string source, text;
  double score;
};
using Value = std::variant<Array, std::string, std::vector<Chunk>>;

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

Failure search(Bundle& bundle, const json& params, const Array& query, std::map<std::string, Value>& out) {
  std::ifstream in(bundle.dir() + "/" + params.at("index").get<std::string>());
  json meta = json::parse(in, nullptr, false);
  if (meta.is_discarded()) return {1, "index " + params.at("index").get<std::string>() + " is unreadable"};
  const int64_t count = meta.at("count"), dim = meta.at("dim");
  if (query.dtype != "float32" || static_cast<int64_t>(query.numel()) != dim)
    return {2, "vector_search: the query has " + std::to_string(query.numel()) + " values, the index " +
                   std::to_string(dim) + " dimensions"};
  std::string folder = params.at("index").get<std::string>();
  folder = folder.substr(0, folder.find_last_of('/') + 1);
  std::ifstream vin(bundle.dir() + "/" + folder + meta.at("vectors").get<std::string>(), std::ios::binary);
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
}  // namespace

Failure run_pipeline(Bundle& bundle, const std::map<std::string, Array>& tensors,
                     const std::map<std::string, std::string>& texts, const std::string& until, json& result) {
  const auto& config = bundle.config();
  if (!config.has_pipeline) return {2, "bundle has no pipeline"};
  std::map<std::string, Value> values;
  for (const auto& [k, v] : tensors) values[k] = v;
  for (const auto& [k, v] : texts) values[k] = v;
  json latency = json::object(), stages = json::object();
  bool reached = until.empty();
  for (const auto& stage : config.stages) {
    std::map<std::string, Value> args;
    for (const auto& item : stage.inputs) {
      auto eq = item.find('=');
      std::string port = item.substr(0, eq), ref = item.substr(eq + 1);
      if (!values.count(ref)) return {2, "stage " + stage.name + ": no value for " + ref + " (pass it with --set or --text)"};
      args[port] = values[ref];
    }
    json params = json::parse(stage.params_json);
    std::map<std::string, Value> out;
    auto start = std::chrono::steady_clock::now();
    if (stage.op == "tokenize") {
      for (const auto& port : stage.outputs) {
        auto it = tensors.find(stage.name + "." + port);
        if (it == tensors.end())
          return {2, "stage " + stage.name + " (tokenize) needs a tokenizer this runtime lacks: pass token ids with "
                     "--set " + stage.name + "." + port + "=FILE.npy"};
        out[port] = it->second;
      }
    } else if (stage.op == "model") {
      const ProgramSpec* p = nullptr;
      for (const auto& c : config.programs) if (c.name == stage.program) p = &c;
      const MethodSpec* m = p ? p->method(stage.method) : nullptr;
      if (!m) return {2, "stage " + stage.name + ": program " + stage.program + " has no method " + stage.method};
      std::vector<Array> inputs, outputs;
      for (const auto& t : m->inputs) {
        auto a = std::get_if<Array>(&args[t.name]);
        if (!a) return {2, "stage " + stage.name + ": input " + t.name + " is not a tensor"};
        inputs.push_back(*a);
      }
      if (Failure f = bundle.run(stage.program, stage.method, inputs, outputs)) return f;
      for (size_t i = 0; i < outputs.size() && i < m->outputs.size(); ++i) out[m->outputs[i].name] = outputs[i];
    } else if (stage.op == "vector_search") {
      auto q = std::get_if<Array>(&args["query"]);
      if (!q) return {2, "stage " + stage.name + ": query is not a tensor"};
      if (Failure f = search(bundle, params, *q, out)) return f;
    } else if (stage.op == "template") {
      std::string text = params.at("template");
      for (const auto& [name, v] : args) {
        std::string key = "{" + name + "}", with = as_text(v);
        for (size_t pos = text.find(key); pos != std::string::npos; pos = text.find(key, pos + with.size()))
          text.replace(pos, key.size(), with);
      }
      out["text"] = text;
    } else {
      return {2, "stage " + stage.name + " (" + stage.op + ") needs the Python runtime (a tokenizer); stop before "
                 "it with --until"};
    }
    latency[stage.name] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    json stage_json = json::object();
    for (const auto& [port, v] : out) {
      values[stage.name + "." + port] = v;
      stage_json[port] = to_json(v);
    }
    stages[stage.name] = stage_json;
    if (stage.name == until) {
      reached = true;
      break;
    }
  }
  if (!reached) return {2, "--until " + until + ": no such stage"};
  result = {{"stages", stages}, {"latency_ms", latency}};
  return {};
}

}  // namespace deployc
