#include "kernels/cuda/cublaslt.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <type_traits>
#include <vector>

#include "onnxtrain/error.h"

namespace onnxtrain::kernels::cuda {
namespace {

const std::string kSoname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);

std::mutex& mu() {
  static std::mutex m;
  return m;
}

std::vector<std::string>& dirs() {
  static std::vector<std::string> d;
  return d;
}

// The functions of the library at `handle`; false (and what is missing in `why`) when one lacks.
bool resolve(void* handle, CublasLt& lt, std::string* why) {
  auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (!fn) *why += std::string(why->empty() ? "" : ", ") + name;
    return fn != nullptr;
  };
  // (every name looked up, with & rather than &&: the message names all that lack)
  bool ok = get(lt.get_version, "cublasLtGetVersion") & get(lt.status_string, "cublasLtGetStatusString") &
            get(lt.create, "cublasLtCreate") & get(lt.desc_create, "cublasLtMatmulDescCreate") &
            get(lt.desc_destroy, "cublasLtMatmulDescDestroy") & get(lt.desc_set, "cublasLtMatmulDescSetAttribute") &
            get(lt.layout_create, "cublasLtMatrixLayoutCreate") &
            get(lt.layout_destroy, "cublasLtMatrixLayoutDestroy") &
            get(lt.layout_set, "cublasLtMatrixLayoutSetAttribute") &
            get(lt.preference_create, "cublasLtMatmulPreferenceCreate") &
            get(lt.preference_destroy, "cublasLtMatmulPreferenceDestroy") &
            get(lt.preference_set, "cublasLtMatmulPreferenceSetAttribute") &
            get(lt.heuristic, "cublasLtMatmulAlgoGetHeuristic") & get(lt.matmul, "cublasLtMatmul");
  return ok;
}

CublasLt load() {
  std::vector<std::pair<std::string, int>> tries;  // file, dlopen flags
  if (const char* file = std::getenv("ONNXTRAIN_CUBLASLT"); file && *file) {
    tries.push_back({file, RTLD_NOW});
  } else {
    tries.push_back({kSoname, RTLD_NOW | RTLD_NOLOAD});  // loaded by PyTorch
    for (const std::string& d : dirs()) tries.push_back({d + "/" + kSoname, RTLD_NOW});
    tries.push_back({kSoname, RTLD_NOW});  // LD_LIBRARY_PATH, the system's folders
  }
  std::string tried;
  for (auto& [file, flags] : tries) {
    void* handle = dlopen(file.c_str(), flags);
    if (!handle) {
      if (!(flags & RTLD_NOLOAD)) tried += "\n  " + file + ": " + dlerror();
      continue;
    }
    CublasLt lt;
    std::string missing;
    if (!resolve(handle, lt, &missing)) {
      tried += "\n  " + file + ": lacks " + missing;
      dlclose(handle);
      continue;
    }
    if (lt.get_version() / 10000 != CUBLAS_VER_MAJOR) {
      tried += "\n  " + file + ": version " + std::to_string(lt.get_version()) + ", not " +
               std::to_string(CUBLAS_VER_MAJOR) + ".x";
      dlclose(handle);
      continue;
    }
    Dl_info info{};
    lt.path = dladdr(reinterpret_cast<void*>(lt.matmul), &info) && info.dli_fname ? info.dli_fname : file;
    return lt;  // (the library stays loaded for the process's life)
  }
  throw UnsupportedError("cuBLASLt (" + kSoname + "), which onnxtrain's CUDA products need, was not found:" + tried +
                         "\nInstall it with `pip install nvidia-cublas` (PyTorch's CUDA wheels bring it), or set "
                         "ONNXTRAIN_CUBLASLT to the library's path.");
}

}  // namespace

void add_cublaslt_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu());
  dirs().push_back(dir);
}

const CublasLt& cublaslt() {
  std::lock_guard<std::mutex> lock(mu());
  static std::optional<CublasLt> lt;
  if (!lt) lt = load();  // (a failure is not kept: a folder added later is tried at the next call)
  return *lt;
}

}  // namespace onnxtrain::kernels::cuda
