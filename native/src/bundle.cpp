#include "bundle.h"

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/core/hierarchical_allocator.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sha256.h"

// The wheel ships libexecutorch_threadpool.so but not its header: the two calls the runner makes.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace deployc {

using executorch::aten::ScalarType;
using executorch::extension::Module;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::Span;

struct Bundle::Loaded {
  std::unique_ptr<Module> module;
  // Per method: one arena of exactly the config's planned size, cut into the program's buffers.
  std::map<std::string, std::vector<uint8_t>> arenas;
  std::map<std::string, std::vector<Span<uint8_t>>> spans;
  std::map<std::string, std::unique_ptr<HierarchicalAllocator>> planned;
};

Bundle::~Bundle() = default;

namespace {
Failure fail(int code, const std::string& msg) { return Failure{code, msg}; }

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "int64") return ScalarType::Long;
  if (dtype == "int32") return ScalarType::Int;
  return ScalarType::Float;
}

std::string dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::Long: return "int64";
    case ScalarType::Int: return "int32";
    case ScalarType::Float: return "float32";
    default: return "unsupported";
  }
}
// QNN's host libraries write notes of their own to stdout (e.g. "# LIBNATIVE: ..."), where the runner
// prints its one JSON document: while they load and initialise, stdout goes to stderr.
class StdoutToStderr {
 public:
  explicit StdoutToStderr(bool active) : saved_(-1) {
    if (!active) return;
    std::fflush(stdout);
    saved_ = dup(1);
    dup2(2, 1);
  }
  ~StdoutToStderr() {
    if (saved_ < 0) return;
    std::fflush(stdout);
    dup2(saved_, 1);
    close(saved_);
  }
  StdoutToStderr(const StdoutToStderr&) = delete;
  StdoutToStderr& operator=(const StdoutToStderr&) = delete;

 private:
  int saved_;
};

// A QNN program needs QNN's host libraries (on an x86 host they hold the HTP emulator). The delegate
// opens "libQnnHtp.so" by name: either from LD_LIBRARY_PATH (a QNN SDK's lib/x86_64-linux-clang),
// or, loaded here first by path, the libraries DEPLOYC_QNN_LIBRARIES names (`deployc native qnn-env`
// prints it; with the PyPI libraries it names deployc's compatibility layer).
Failure prepare_backend(const ProgramSpec& p) {
  if (p.backend == "litert")
    return fail(2, "program " + p.name + " is a LiteRT program (" + p.file + "): an app runs it with the LiteRT "
                   "runtime; this runner runs ExecuTorch programs only");
  if (p.backend != "qnn") return {};
  static bool ready = false;
  if (ready) return {};
  const char* listed = std::getenv("DEPLOYC_QNN_LIBRARIES");
  if (listed && *listed) {
    std::stringstream paths(listed);
    std::string path;
    while (std::getline(paths, path, ':')) {
      if (path.empty()) continue;
      // RTLD_LOCAL: the libraries bring their own libc++.
      if (!dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        return fail(2, "program " + p.name + " runs on the Snapdragon NPU (QNN): cannot load " + path +
                           " from DEPLOYC_QNN_LIBRARIES: " + dlerror());
      }
    }
  } else if (!dlopen("libQnnHtp.so", RTLD_NOW | RTLD_LOCAL)) {
    return fail(2, "program " + p.name + " runs on the Snapdragon NPU (QNN): this host needs QNN's host libraries "
                   "(libQnnHtp.so, libQnnSystem.so) to run it through the HTP emulator; set DEPLOYC_QNN_LIBRARIES "
                   "(`deployc native qnn-env` prints it) or put a QNN SDK's lib/x86_64-linux-clang on "
                   "LD_LIBRARY_PATH");
  }
  ready = true;
  return {};
}
}  // namespace

// XNNPACK gives each delegate a workspace of its own by default, each as large as that delegate's largest call
// needs. A program's delegates run one after another, so they share one (ExecuTorch's per-model sharing
// mode): SmolLM2's program (92 delegates) peaked at 3.3 GB on a 480-token prompt without, 2.1 GB with.
static void share_xnnpack_workspaces() {
  executorch::runtime::BackendOptions<1> options;
  options.set_option("workspace_sharing_mode", 1);  // WorkspaceSharingMode::PerModel
  (void)executorch::runtime::set_option("XnnpackBackend", options.view());  // NotFound: no XNNPACK linked
}

namespace {
// runtime.bin checks the files it names, but nothing checks runtime.bin itself: a flipped byte in one of its
// numbers still decodes. bundle.lock.json records its sha256; a bundle without a lock (an app may drop it)
// is taken as it is.
Failure check_config_against_lock(const std::string& dir) {
  std::ifstream in(dir + "/bundle.lock.json");
  if (!in) return {};
  const nlohmann::json lock = nlohmann::json::parse(in, nullptr, false);
  if (lock.is_discarded() || !lock.contains("files") || !lock["files"].contains("runtime.bin") ||
      !lock["files"]["runtime.bin"].contains("sha256") || !lock["files"]["runtime.bin"]["sha256"].is_string())
    return fail(2, dir + "/bundle.lock.json: unreadable, or it lists no sha256 for runtime.bin");
  if (file_sha256(dir + "/runtime.bin") != lock["files"]["runtime.bin"]["sha256"].get<std::string>())
    return fail(2, "runtime.bin: sha256 does not match bundle.lock.json");
  return {};
}
}  // namespace

std::unique_ptr<Bundle> Bundle::open(const std::string& dir, Failure& failure, Check check) {
  share_xnnpack_workspaces();
  std::unique_ptr<Bundle> b(new Bundle());
  b->dir_ = dir;
  std::string err = read_runtime_config(dir + "/runtime.bin", b->config_);
  if (err.empty()) {
    if (Failure f = check_config_against_lock(dir)) {
      failure = f;
      return nullptr;
    }
  }
  if (!err.empty()) {
    failure = fail(2, err);
    return nullptr;
  }
  struct Expected {
    std::string file, sha256;
    uint64_t size = 0;  // 0: not recorded in runtime.bin (assets)
  };
  std::vector<Expected> files;  // every file the config names
  for (const auto& p : b->config_.programs) {
    files.push_back({p.file, p.sha256, p.size_bytes});
    // A program loaded without its external weights crashes the runtime: the data file is checked too.
    if (!p.data_file.empty()) files.push_back({p.data_file, p.data_sha256, p.data_bytes});
  }
  for (const auto& a : b->config_.assets) files.push_back({a.file, a.sha256, 0});
  for (const auto& [file, sha, size] : files) {
    if (file.empty() || file[0] == '/' || file.find("..") != std::string::npos) {
      failure = fail(2, "runtime.bin names an unsafe path: " + file);
      return nullptr;
    }
    std::string path = dir + "/" + file;
    if (!std::filesystem::is_regular_file(path)) {
      failure = fail(2, file + ": missing from the bundle");
      return nullptr;
    }
    if (check == Check::Sizes) {
      if (size != 0 && std::filesystem::file_size(path) != size) {
        failure = fail(2, file + ": size does not match runtime.bin");
        return nullptr;
      }
    } else if (file_sha256(path) != sha) {
      failure = fail(2, file + ": sha256 does not match runtime.bin");
      return nullptr;
    }
  }
  int threads = 0;
  for (const auto& p : b->config_.programs) threads = std::max(threads, p.threads);
  b->set_threads(threads);
  return b;
}

void Bundle::set_threads(int threads) {
  auto* pool = executorch::extension::threadpool::get_threadpool();
  if (pool && threads > 0) pool->_unsafe_reset_threadpool(static_cast<uint32_t>(threads));
}

int Bundle::threads() const {
  auto* pool = executorch::extension::threadpool::get_threadpool();
  return pool ? static_cast<int>(pool->get_thread_count()) : 1;
}

Failure Bundle::write_etdump(const std::string& program, const std::string& path) {
  auto found = loaded_.find(program);
  auto* gen = found == loaded_.end() ? nullptr
                                     : static_cast<executorch::etdump::ETDumpGen*>(found->second->module->event_tracer());
  if (!gen) return fail(2, program + ": not loaded with event tracing on; nothing to write to " + path);
  executorch::etdump::ETDumpResult dump = gen->get_etdump_data();
  if (!dump.buf || dump.size == 0) return fail(1, program + ": the event tracer recorded nothing");
  std::string tmp = path + ".tmp";  // a reader never sees half a file
  FILE* out = std::fopen(tmp.c_str(), "wb");
  bool ok = out && std::fwrite(dump.buf, 1, dump.size, out) == dump.size;
  if (out) ok = std::fclose(out) == 0 && ok;
  std::free(dump.buf);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return fail(1, "cannot write the ETDump to " + path);
  }
  return {};
}

Failure Bundle::load(const std::string& program, const std::string& method, double* milliseconds) {
  const ProgramSpec* p = nullptr;
  for (const auto& candidate : config_.programs) if (candidate.name == program) p = &candidate;
  if (!p) return fail(2, "no program named '" + program + "' in the bundle");
  const MethodSpec* m = p->method(method);
  if (!m && method == "forward" && p->static_decoder.chunk > 0) {  // the driver's two methods
    if (Failure f = load(program, p->static_decoder.prefill_method, milliseconds)) return f;
    return load(program, p->static_decoder.decode_method);
  }
  if (!m) return fail(2, "program '" + program + "' has no method '" + method + "'");
  double start = now_ms();
  StdoutToStderr quiet(p->backend == "qnn");
  auto& slot = loaded_[program];
  if (!slot) {
    if (Failure f = prepare_backend(*p)) {
      loaded_.erase(program);
      return f;
    }
    slot = std::make_unique<Loaded>();
    std::unique_ptr<executorch::runtime::EventTracer> tracer;
    if (trace_events_) tracer = std::make_unique<executorch::etdump::ETDumpGen>();
    slot->module = p->data_file.empty()
                       ? std::make_unique<Module>(dir_ + "/" + p->file, Module::LoadMode::Mmap, std::move(tracer))
                       : std::make_unique<Module>(dir_ + "/" + p->file, dir_ + "/" + p->data_file,
                                                  Module::LoadMode::Mmap, std::move(tracer));
  }
  if (slot->planned.count(method)) return {};
  auto meta = slot->module->method_meta(method);
  if (!meta.ok()) return fail(1, program + "." + method + ": cannot read method metadata (error " +
                                 std::to_string(static_cast<int>(meta.error())) + ")");
  uint64_t needed = 0;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < meta->num_memory_planned_buffers(); ++i) {
    sizes.push_back(static_cast<size_t>(meta->memory_planned_buffer_size(i).get()));
    needed += sizes.back();
  }
  if (needed != m->planned_memory_bytes) {
    std::ostringstream msg;
    msg << program << "." << method << ": runtime.bin plans " << m->planned_memory_bytes
        << " bytes but the program needs " << needed << "; the config does not belong to this program";
    return fail(2, msg.str());
  }
  auto& arena = slot->arenas[method];
  arena.assign(m->planned_memory_bytes, 0);
  auto& spans = slot->spans[method];
  size_t offset = 0;
  for (size_t s : sizes) {
    spans.emplace_back(arena.data() + offset, s);
    offset += s;
  }
  slot->planned[method] = std::make_unique<HierarchicalAllocator>(Span<Span<uint8_t>>(spans.data(), spans.size()));
  auto err = slot->module->load_method(method, slot->planned[method].get());
  if (err != executorch::runtime::Error::Ok) {
    slot->planned.erase(method);
    return fail(1, program + "." + method + ": load failed (error 0x" +
                       [&] { std::ostringstream h; h << std::hex << static_cast<int>(err); return h.str(); }() +
                       "); is the backend (" + (m->delegates.empty() ? "portable" : m->delegates[0]) +
                       ") registered in this runtime?");
  }
  if (milliseconds) *milliseconds = now_ms() - start;
  // Declared warm-up: zeros at each input's smallest allowed shape.
  if (method == "forward" && p->warmup > 0 && !m->inputs.empty()) {
    std::vector<Array> inputs;
    for (const auto& t : m->inputs) {
      Array a;
      a.dtype = t.dtype;
      for (const auto& d : t.shape) a.shape.push_back(d.value >= 0 ? d.value : d.min);
      a.data.assign(a.numel() * dtype_size(a.dtype), 0);
      inputs.push_back(a);
    }
    std::vector<Array> ignored;
    for (int i = 0; i < p->warmup; ++i) {
      Failure f = run(program, method, inputs, ignored);
      if (f) return f;
    }
  }
  return {};
}

namespace {
std::vector<const Array*> views(const std::vector<Array>& arrays) {
  std::vector<const Array*> out;
  out.reserve(arrays.size());
  for (const auto& a : arrays) out.push_back(&a);
  return out;
}
}  // namespace

Failure Bundle::check_inputs(const ProgramSpec& p, const MethodSpec& m,
                             const std::vector<const Array*>& inputs) const {
  if (inputs.size() != m.inputs.size()) {
    std::ostringstream msg;
    msg << p.name << "." << m.name << " takes " << m.inputs.size() << " input(s), got " << inputs.size();
    return fail(2, msg.str());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& spec = m.inputs[i];
    const auto& a = *inputs[i];
    if (a.dtype != spec.dtype) return fail(2, p.name + " input " + spec.name + ": dtype " + a.dtype + ", declared " + spec.dtype);
    if (a.shape.size() != spec.shape.size())
      return fail(2, p.name + " input " + spec.name + ": rank " + std::to_string(a.shape.size()) + ", declared " +
                         std::to_string(spec.shape.size()));
    for (size_t axis = 0; axis < a.shape.size(); ++axis) {
      const Dim& d = spec.shape[axis];
      int64_t lo = d.value >= 0 ? d.value : d.min, hi = d.value >= 0 ? d.value : d.max;
      if (a.shape[axis] < lo || a.shape[axis] > hi) {
        std::ostringstream msg;
        msg << p.name << " input " << spec.name << ": " << (d.symbol.empty() ? "dim " + std::to_string(axis) : d.symbol)
            << " = " << a.shape[axis] << " is outside the declared range [" << lo << ", " << hi << "]";
        return fail(2, msg.str());
      }
      if (d.value < 0 && d.multiple_of > 1 && a.shape[axis] % d.multiple_of != 0) {
        std::ostringstream msg;
        msg << p.name << " input " << spec.name << ": " << (d.symbol.empty() ? "dim " + std::to_string(axis) : d.symbol)
            << " = " << a.shape[axis] << " is not a multiple of " << d.multiple_of;
        return fail(2, msg.str());
      }
    }
  }
  return {};
}

Failure Bundle::run(const std::string& program, const std::string& method, const std::vector<Array>& inputs,
                    std::vector<Array>& outputs, double* milliseconds) {
  if (Failure f = load(program, method)) return f;
  const ProgramSpec* p = nullptr;
  for (const auto& candidate : config_.programs) if (candidate.name == program) p = &candidate;
  const MethodSpec* m = p->method(method);
  if (!m) {  // loaded: so a decoder in the static form, called through its interface
    if (inputs.size() != 2) return fail(2, program + ".forward takes tokens and input_pos");
    auto& session = sessions_[program];
    if (!session) session = std::make_unique<StaticDecoding>(*this, program, p->static_decoder);
    double start = now_ms();
    Failure f = session->forward(inputs[0], inputs[1], outputs);
    if (milliseconds) *milliseconds = now_ms() - start;
    return f;
  }
  return call(*p, *m, views(inputs), outputs, milliseconds);
}

Failure Bundle::run(const std::string& program, const std::string& method, const std::vector<const Array*>& inputs,
                    std::vector<Array>& outputs, double* milliseconds) {
  if (Failure f = load(program, method)) return f;
  const ProgramSpec* p = nullptr;
  for (const auto& candidate : config_.programs) if (candidate.name == program) p = &candidate;
  const MethodSpec* m = p->method(method);
  if (!m) return fail(2, program + " has no method " + method);
  return call(*p, *m, inputs, outputs, milliseconds);
}

Failure Bundle::call(const ProgramSpec& p, const MethodSpec& m, const std::vector<const Array*>& inputs,
                     std::vector<Array>& outputs, double* milliseconds) {
  if (Failure f = check_inputs(p, m, inputs)) return f;
  double start = now_ms();
  StdoutToStderr quiet(p.backend == "qnn");
  Failure f = execute(*loaded_[p.name]->module, p.name, m.name, inputs, outputs);
  if (milliseconds) *milliseconds = now_ms() - start;
  return f;
}

Failure execute(Module& module, const std::string& label, const std::string& method, const std::vector<Array>& inputs,
                std::vector<Array>& outputs) {
  return execute(module, label, method, views(inputs), outputs);
}

Failure execute(Module& module, const std::string& label, const std::string& method,
                const std::vector<const Array*>& inputs, std::vector<Array>& outputs) {
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<EValue> values;
  for (const Array* input : inputs) {
    const Array& a = *input;
    std::vector<executorch::aten::SizesType> sizes(a.shape.begin(), a.shape.end());
    tensors.push_back(executorch::extension::make_tensor_ptr(sizes, const_cast<uint8_t*>(a.data.data()),
                                                             scalar_type(a.dtype)));
    values.emplace_back(*tensors.back());
  }
  auto result = module.execute(method, values);
  if (!result.ok())
    return fail(1, label + "." + method + ": execution failed (error " +
                       std::to_string(static_cast<int>(result.error())) + ")");
  outputs.clear();
  for (const auto& v : result.get()) {
    if (!v.isTensor()) continue;
    const auto& t = v.toTensor();
    Array a;
    a.dtype = dtype_name(t.scalar_type());
    for (auto s : t.sizes()) a.shape.push_back(s);
    a.data.resize(t.nbytes());
    std::memcpy(a.data.data(), t.const_data_ptr(), t.nbytes());
    outputs.push_back(std::move(a));
  }
  return {};
}

}  // namespace deployc
