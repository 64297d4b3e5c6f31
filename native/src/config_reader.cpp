// Decodes runtime.bin with code flatc generated from deployc/packaging/runtime_config.fbs.
#include <fstream>
#include <iterator>
#include <sstream>

#include "config.h"
#include "runtime_config_generated.h"

namespace deployc {
namespace fb = deployc::config;

namespace {
std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

std::vector<std::string> strings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v) for (const auto* s : *v) out.push_back(str(s));
  return out;
}

std::vector<TensorSpec> tensors(const flatbuffers::Vector<flatbuffers::Offset<fb::TensorSpec>>* v) {
  std::vector<TensorSpec> out;
  if (!v) return out;
  for (const auto* t : *v) {
    TensorSpec spec{str(t->name()), str(t->dtype()), {}};
    if (t->shape())
      for (const auto* d : *t->shape()) spec.shape.push_back(Dim{d->value(), str(d->symbol()), d->min(), d->max(), d->multiple_of()});
    out.push_back(spec);
  }
  return out;
}
}  // namespace

std::string read_runtime_config(const std::string& path, RuntimeConfig& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path;
  std::vector<uint8_t> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (buf.size() < 8 || !fb::RuntimeConfigBufferHasIdentifier(buf.data()))
    return path + ": not a deployc runtime config (file identifier is not DPLC)";
  flatbuffers::Verifier verifier(buf.data(), buf.size());
  if (!fb::VerifyRuntimeConfigBuffer(verifier)) return path + ": damaged runtime config (flatbuffer verification failed)";
  const fb::RuntimeConfig* c = fb::GetRuntimeConfig(buf.data());
  if (c->schema_version() > kSchemaVersion) {
    std::ostringstream msg;
    msg << path << ": runtime config schema version " << c->schema_version()
        << " is newer than this runner understands (" << kSchemaVersion << "); rebuild the runner";
    return msg.str();
  }
  out.schema_version = c->schema_version();
  out.deployc_version = str(c->deployc_version());
  if (c->bundle()) {
    out.name = str(c->bundle()->name());
    out.version = str(c->bundle()->version());
    out.target = str(c->bundle()->target());
  }
  if (c->programs()) {
    for (const auto* p : *c->programs()) {
      ProgramSpec spec;
      spec.name = str(p->name()); spec.file = str(p->file()); spec.sha256 = str(p->sha256());
      spec.unit = str(p->unit()); spec.backend = str(p->backend()); spec.quantization = str(p->quantization());
      spec.size_bytes = p->size_bytes(); spec.threads = p->threads(); spec.warmup = p->warmup();
      spec.verification = p->verification() ? str(p->verification()->status()) : "";
      spec.data_file = str(p->data_file());
      spec.data_sha256 = str(p->data_sha256());
      spec.data_bytes = p->data_bytes();
      if (p->verification()) {
        spec.tolerance_min_cosine = p->verification()->tolerance_min_cosine();
        spec.tolerance_min_sqnr_db = p->verification()->tolerance_min_sqnr_db();
        spec.tolerance_max_perplexity_ratio = p->verification()->tolerance_max_perplexity_ratio();
        spec.tolerance_max_kl = p->verification()->tolerance_max_kl();
        spec.tolerance_min_top1 = p->verification()->tolerance_min_top1();
        spec.tolerance_min_topk_overlap = p->verification()->tolerance_min_topk_overlap();
      }
      if (const auto* d = p->static_decoder())
        spec.static_decoder = StaticDecoderSpec{str(d->prefill_method()), str(d->decode_method()), str(d->update()),
                                                d->chunk(), d->context(), d->layers(), d->kv_heads(), d->head_dim(),
                                                d->masked_value(), d->prefix_token()};
      if (p->methods())
        for (const auto* m : *p->methods())
          spec.methods.push_back(MethodSpec{str(m->name()), tensors(m->inputs()), tensors(m->outputs()),
                                            m->planned_memory_bytes(), strings(m->operators()),
                                            strings(m->delegates())});
      out.programs.push_back(spec);
    }
  }
  if (c->assets())
    for (const auto* a : *c->assets())
      out.assets.push_back(AssetSpec{str(a->name()), str(a->file()), str(a->sha256()), str(a->kind())});
  if (const auto* p = c->pipeline()) {
    out.has_pipeline = true;
    out.pipeline_inputs = strings(p->inputs());
    out.pipeline_outputs = strings(p->outputs());
    out.pipeline_input_types = strings(p->input_types());
    out.pipeline_input_types.resize(out.pipeline_inputs.size(), "text");
    if (p->stages())
      for (const auto* s : *p->stages())
        out.stages.push_back(StageSpec{str(s->name()), str(s->op()), str(s->program()), str(s->method()),
                                       str(s->params_json()), strings(s->inputs()), strings(s->outputs())});
  }
  return "";
}

}  // namespace deployc
