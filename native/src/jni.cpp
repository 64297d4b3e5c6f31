// The JNI side of the Java API (native/java/dev/deployc/Bundle.java): one handle per open bundle, the same
// Bundle, Pipeline and self-test the runner uses. Every entry point turns a failure into a
// dev.deployc.DeploycException carrying the runtime's message and exit code (1: the runtime failed, 2: bad
// bundle or input); no C++ exception crosses into the JVM. Strings cross as UTF-8 bytes in and UTF-16 out:
// JNI's own "UTF" functions speak modified UTF-8, which mangles characters outside the BMP.
#include <jni.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bundle.h"
#include "pipeline.h"
#include "self_test.h"

using deployc::Bundle;
using deployc::Failure;
using deployc::Pipeline;
using nlohmann::json;

namespace {

struct Handle {
  std::unique_ptr<Bundle> bundle;
  std::unique_ptr<Pipeline> pipeline;  // opened by the first run: loading the programs is its cost
  std::atomic<bool> cancel{false};
};

Handle* handle_of(jlong h) { return reinterpret_cast<Handle*>(static_cast<intptr_t>(h)); }

// UTF-8 -> UTF-16, a malformed sequence as U+FFFD (a streamed piece may end inside a character's bytes
// when the tokenizer decodes byte tokens).
std::u16string utf16(const std::string& s) {
  std::u16string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = n != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const auto cb = static_cast<unsigned char>(s[i + k]);
      ok = (cb >> 6) == 0x2;
      c = (c << 6) | (cb & 0x3F);
    }
    static const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && c >= least[n] && c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF);
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    if (c >= 0x10000) {
      c -= 0x10000;
      out.push_back(static_cast<char16_t>(0xD800 + (c >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 + (c & 0x3FF)));
    } else {
      out.push_back(static_cast<char16_t>(c));
    }
    i += n;
  }
  return out;
}

jstring to_java(JNIEnv* env, const std::string& s) {
  const std::u16string u = utf16(s);
  return env->NewString(reinterpret_cast<const jchar*>(u.data()), static_cast<jsize>(u.size()));
}

std::string bytes_of(JNIEnv* env, jbyteArray array) {
  const jsize n = env->GetArrayLength(array);
  std::string out(static_cast<size_t>(n), '\0');
  env->GetByteArrayRegion(array, 0, n, reinterpret_cast<jbyte*>(out.data()));
  return out;
}

void raise(JNIEnv* env, const Failure& f) {
  if (env->ExceptionCheck()) return;  // a Java exception already pending wins
  jclass cls = env->FindClass("dev/deployc/DeploycException");
  if (cls == nullptr) return;  // FindClass left NoClassDefFoundError pending
  jmethodID init = env->GetMethodID(cls, "<init>", "(ILjava/lang/String;)V");
  jobject e = env->NewObject(cls, init, static_cast<jint>(f.exit_code), to_java(env, f.message));
  if (e != nullptr) env->Throw(static_cast<jthrowable>(e));
}

std::string dumped(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Runs `body`, turning a C++ exception into a DeploycException (exit code 1): nothing unwinds into the JVM.
template <typename T, typename F>
T guarded(JNIEnv* env, T fallback, F body) {
  try {
    return body();
  } catch (const std::exception& e) {
    raise(env, {1, std::string("internal error: ") + e.what()});
  } catch (...) {
    raise(env, {1, "internal error"});
  }
  return fallback;
}

json describe(const deployc::RuntimeConfig& c) {
  json inputs = json::array(), programs = json::array(), stages = json::array();
  for (size_t i = 0; i < c.pipeline_inputs.size(); ++i)
    inputs.push_back({{"name", c.pipeline_inputs[i]}, {"type", c.pipeline_input_types.at(i)}});
  json outputs = json::array();
  for (const auto& item : c.pipeline_outputs) outputs.push_back(item.substr(0, item.find('=')));
  for (const auto& p : c.programs) {
    json methods = json::array();
    for (const auto& m : p.methods) methods.push_back(m.name);
    programs.push_back({{"name", p.name}, {"file", p.file}, {"backend", p.backend}, {"quantization", p.quantization},
                        {"verification", p.verification}, {"size_bytes", p.size_bytes}, {"methods", methods}});
  }
  for (const auto& s : c.stages) stages.push_back({{"name", s.name}, {"op", s.op}});
  return {{"name", c.name}, {"version", c.version}, {"target", c.target}, {"schema_version", c.schema_version},
          {"deployc_version", c.deployc_version}, {"inputs", inputs}, {"outputs", outputs},
          {"programs", programs}, {"stages", stages}};
}

std::string a(const std::string& kind) { return kind == "image" ? "an image" : kind; }  // text, audio

// The inputs' kinds (what the app handed over: text, image or audio) against what the pipeline declares.
Failure check_kinds(const deployc::RuntimeConfig& c, const std::vector<std::pair<std::string, std::string>>& kinds) {
  for (const auto& [name, kind] : kinds) {
    for (size_t i = 0; i < c.pipeline_inputs.size(); ++i) {
      const std::string& declared = c.pipeline_input_types.at(i);
      if (c.pipeline_inputs[i] == name && declared != kind)
        return {2, "input " + name + " is " + a(declared) + "; given " + a(kind)};
    }
  }
  return {};
}

}  // namespace

extern "C" {

JNIEXPORT jlong JNICALL Java_dev_deployc_Bundle_nativeOpen(JNIEnv* env, jclass, jbyteArray dir, jboolean quick) {
  return guarded<jlong>(env, 0, [&]() -> jlong {
    Failure f;
    auto bundle = Bundle::open(bytes_of(env, dir), f, quick ? deployc::Check::Sizes : deployc::Check::Full);
    if (!bundle) {
      raise(env, f);
      return 0;
    }
    auto* h = new Handle();
    h->bundle = std::move(bundle);
    return static_cast<jlong>(reinterpret_cast<intptr_t>(h));
  });
}

JNIEXPORT jstring JNICALL Java_dev_deployc_Bundle_nativeDescribe(JNIEnv* env, jclass, jlong h) {
  return guarded<jstring>(env, nullptr, [&] { return to_java(env, dumped(describe(handle_of(h)->bundle->config()))); });
}

JNIEXPORT jstring JNICALL Java_dev_deployc_Bundle_nativeRun(JNIEnv* env, jclass, jlong h, jobjectArray names,
                                                            jobjectArray kinds, jobjectArray values, jobject listener,
                                                            jbyteArray until) {
  return guarded<jstring>(env, nullptr, [&]() -> jstring {
    Handle* handle = handle_of(h);
    std::map<std::string, std::string> texts;
    std::vector<std::pair<std::string, std::string>> given;
    for (jsize i = 0; i < env->GetArrayLength(names); ++i) {
      auto name = static_cast<jbyteArray>(env->GetObjectArrayElement(names, i));
      auto kind = static_cast<jbyteArray>(env->GetObjectArrayElement(kinds, i));
      auto value = static_cast<jbyteArray>(env->GetObjectArrayElement(values, i));
      given.emplace_back(bytes_of(env, name), bytes_of(env, kind));
      texts[given.back().first] = bytes_of(env, value);
      env->DeleteLocalRef(name);
      env->DeleteLocalRef(kind);
      env->DeleteLocalRef(value);
    }
    if (Failure f = check_kinds(handle->bundle->config(), given)) {
      raise(env, f);
      return nullptr;
    }
    Failure f;
    if (!handle->pipeline && !(handle->pipeline = Pipeline::open(*handle->bundle, f))) {
      raise(env, f);
      return nullptr;
    }
    handle->cancel = false;
    jthrowable thrown = nullptr;  // the listener's exception, rethrown once the run has unwound
    deployc::RunOptions options;
    options.until = bytes_of(env, until);
    options.cancelled = [handle] { return handle->cancel.load(); };
    jmethodID on_token = nullptr;
    if (listener != nullptr) {
      on_token = env->GetMethodID(env->GetObjectClass(listener), "onToken", "(Ljava/lang/String;)Z");
      if (on_token == nullptr) return nullptr;
      options.on_text = [&](const std::string& piece) {
        if (thrown != nullptr) return;
        jstring s = to_java(env, piece);
        const jboolean more = env->CallBooleanMethod(listener, on_token, s);
        env->DeleteLocalRef(s);
        if (env->ExceptionCheck()) {
          thrown = env->ExceptionOccurred();
          env->ExceptionClear();
          handle->cancel = true;
        } else if (!more) {
          handle->cancel = true;
        }
      };
    }
    handle->pipeline->set_options(options);
    json result;
    Failure rf = handle->pipeline->run(texts, {}, result);
    handle->pipeline->set_options({});  // the listener's lambda holds this call's JNIEnv
    if (thrown != nullptr) {
      env->Throw(thrown);
      return nullptr;
    }
    if (rf) {
      raise(env, rf);
      return nullptr;
    }
    result["threads"] = handle->bundle->threads();
    return to_java(env, dumped(result));
  });
}

JNIEXPORT void JNICALL Java_dev_deployc_Bundle_nativeCancel(JNIEnv*, jclass, jlong h) { handle_of(h)->cancel = true; }

JNIEXPORT jstring JNICALL Java_dev_deployc_Bundle_nativeSelfTest(JNIEnv* env, jclass, jlong h) {
  return guarded<jstring>(env, nullptr, [&]() -> jstring {
    json result;
    if (Failure f = deployc::self_test(*handle_of(h)->bundle, result)) {
      raise(env, f);
      return nullptr;
    }
    return to_java(env, dumped(result));
  });
}

JNIEXPORT void JNICALL Java_dev_deployc_Bundle_nativeSetThreads(JNIEnv* env, jclass, jlong h, jint threads) {
  guarded<int>(env, 0, [&] {
    handle_of(h)->bundle->set_threads(threads);
    return 0;
  });
}

JNIEXPORT jint JNICALL Java_dev_deployc_Bundle_nativeThreads(JNIEnv* env, jclass, jlong h) {
  return guarded<jint>(env, 0, [&] { return static_cast<jint>(handle_of(h)->bundle->threads()); });
}

JNIEXPORT void JNICALL Java_dev_deployc_Bundle_nativeClose(JNIEnv* env, jclass, jlong h) {
  guarded<int>(env, 0, [&] {
    Handle* handle = handle_of(h);
    handle->pipeline.reset();  // before the bundle it runs
    delete handle;
    return 0;
  });
}

}  // extern "C"
