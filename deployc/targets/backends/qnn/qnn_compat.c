/*
 * deployc's QNN compatibility layer: stands in as libQnnHtp.so in front of the QNN 2.51 host
 * libraries that the PyPI wheel onnxruntime-qnn 2.7.0 ships, for ExecuTorch 1.5.1, which was
 * compiled against the QNN 2.37 headers.
 *
 * Why: in newer headers the union inside QnnHtpDevice_CustomConfig_t gained a pointer member, so it
 * moved from byte offset 4 to offset 8. ExecuTorch writes the SoC model at +4, the 2.51 library reads
 * +8 and sees 0 ("unknown custom config socModel 0", device creation fails). This layer hands out
 * the real library's interface table with one entry changed: deviceCreate, which copies each HTP
 * custom config into the new layout before calling the real one. Everything else is the real table.
 *
 * It refuses, with a message on stderr, any library that is not the one it was made for (build id
 * DEPLOYC_QNN_EXPECTED_BUILD, API major 2), or whose table does not look as expected.
 *
 * Build (deployc does this on first use, into its cache):
 *   cc -shared -fPIC -O2 -o libQnnHtp.so qnn_compat.c -ldl -Wl,-z,nodelete -Wl,-soname,libQnnHtp.so
 *      -DDEPLOYC_QNN_REAL_HTP='"/path/to/real/libQnnHtp.so"'
 * -z nodelete: the ExecuTorch backend dlcloses the library once after reading its build id; the
 * table handed out must stay mapped.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef DEPLOYC_QNN_REAL_HTP
#error "define DEPLOYC_QNN_REAL_HTP as the path of the real libQnnHtp.so"
#endif
#ifndef DEPLOYC_QNN_EXPECTED_BUILD
#define DEPLOYC_QNN_EXPECTED_BUILD "v2.51."
#endif

typedef uint64_t ErrorHandle;
#define SUCCESS 0
#define ERROR_INCOMPATIBLE_BINARIES 1008 /* QNN_COMMON_ERROR_INCOMPATIBLE_BINARIES */
#define ERROR_MEM_ALLOC 1002

typedef struct { uint32_t major, minor, patch; } Version;
typedef struct { Version core, backend; } ApiVersion;

/* QnnInterface_t of API 2.x: the function table follows the version. Slot numbers are positions in
 * QNN_INTERFACE_VER_TYPE (propertyHasCapability is 0). The copy holds more slots than any 2.x table
 * has; the caller reads only the slots its headers know. */
enum { SLOTS = 96, SLOT_BACKEND_GET_BUILD_ID = 4, SLOT_DEVICE_CREATE = 40 };
typedef struct {
  uint32_t backendId;
  const char* providerName;
  ApiVersion apiVersion;
  void* fn[SLOTS];
} Interface;

/* QnnDevice_Config_t: an option and a union whose first member is a pointer (so at +8 in both). */
enum { DEVICE_CONFIG_OPTION_CUSTOM = 0 };
typedef struct { uint32_t option; const void* custom; } DeviceConfig;
/* QnnHtpDevice_CustomConfig_t as 2.37 lays it out (union at +4, 8 bytes) and as 2.51 does (+8). */
typedef struct { uint32_t option; uint32_t value[2]; } HtpConfigOld;
typedef struct { uint32_t option; uint32_t pad; uint32_t value[2]; uint64_t spare[2]; } HtpConfigNew;

typedef ErrorHandle (*GetProvidersFn)(const Interface***, uint32_t*);
typedef ErrorHandle (*GetBuildIdFn)(const char**);
typedef ErrorHandle (*DeviceCreateFn)(void*, const DeviceConfig**, void**);

enum { MAX_PROVIDERS = 4 };
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Interface copies[MAX_PROVIDERS];
static const Interface* handed_out[MAX_PROVIDERS];
static uint32_t provider_count;
static DeviceCreateFn real_device_create;

static ErrorHandle device_create(void* logger, const DeviceConfig** config, void** device) {
  if (config == NULL) return real_device_create(logger, config, device);
  size_t n = 0;
  while (config[n] != NULL) n++;
  DeviceConfig* configs = calloc(n ? n : 1, sizeof *configs);
  HtpConfigNew* htp = calloc(n ? n : 1, sizeof *htp);
  const DeviceConfig** list = calloc(n + 1, sizeof *list);
  if (configs == NULL || htp == NULL || list == NULL) {
    free(configs), free(htp), free(list);
    return ERROR_MEM_ALLOC;
  }
  for (size_t i = 0; i < n; i++) {
    configs[i] = *config[i];
    if (configs[i].option == DEVICE_CONFIG_OPTION_CUSTOM && configs[i].custom != NULL) {
      const HtpConfigOld* old = configs[i].custom;
      htp[i].option = old->option;
      memcpy(htp[i].value, old->value, sizeof old->value);
      configs[i].custom = &htp[i];
    }
    list[i] = &configs[i];
  }
  ErrorHandle status = real_device_create(logger, list, device);
  free(list), free(htp), free(configs);
  return status;
}

static int refuse(const char* why, const char* detail) {
  fprintf(stderr, "deployc QNN compatibility layer: %s%s (it was made for QNN %s libraries, %s); refusing\n",
          why, detail, DEPLOYC_QNN_EXPECTED_BUILD, DEPLOYC_QNN_REAL_HTP);
  return 0;
}

static int load_locked(void) {
  if (provider_count > 0) return 1;
  void* real = dlopen(DEPLOYC_QNN_REAL_HTP, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (real == NULL) return refuse("cannot load the real library: ", dlerror());
  GetProvidersFn get = (GetProvidersFn)dlsym(real, "QnnInterface_getProviders");
  if (get == NULL) return refuse("the real library has no QnnInterface_getProviders", "");
  const Interface** providers = NULL;
  uint32_t count = 0;
  if (get(&providers, &count) != SUCCESS || providers == NULL || count == 0) {
    return refuse("the real library lists no interface providers", "");
  }
  if (count > MAX_PROVIDERS) count = MAX_PROVIDERS;
  for (uint32_t i = 0; i < count; i++) {
    memcpy(&copies[i], providers[i], sizeof copies[i]);
    if (copies[i].apiVersion.core.major != 2) return refuse("unexpected QNN API major version", "");
    GetBuildIdFn build_id = (GetBuildIdFn)copies[i].fn[SLOT_BACKEND_GET_BUILD_ID];
    const char* id = NULL;
    if (build_id == NULL || build_id(&id) != SUCCESS || id == NULL) return refuse("no build id", "");
    if (strncmp(id, DEPLOYC_QNN_EXPECTED_BUILD, strlen(DEPLOYC_QNN_EXPECTED_BUILD)) != 0) {
      return refuse("the library's build id is ", id);
    }
    Dl_info where;
    void* create = copies[i].fn[SLOT_DEVICE_CREATE];
    if (create == NULL || dladdr(create, &where) == 0 || where.dli_fname == NULL ||
        strstr(where.dli_fname, "libQnnHtp") == NULL) {
      return refuse("the interface table is not laid out as expected", "");
    }
    real_device_create = (DeviceCreateFn)create;
    copies[i].fn[SLOT_DEVICE_CREATE] = (void*)device_create;
    handed_out[i] = &copies[i];
  }
  provider_count = count;
  return 1;
}

ErrorHandle QnnInterface_getProviders(const Interface*** providerList, uint32_t* numProviders) {
  if (providerList == NULL || numProviders == NULL) return 1004; /* QNN_COMMON_ERROR_INVALID_ARGUMENT */
  pthread_mutex_lock(&lock);
  int ok = load_locked();
  pthread_mutex_unlock(&lock);
  if (!ok) return ERROR_INCOMPATIBLE_BINARIES;
  *providerList = handed_out;
  *numProviders = provider_count;
  return SUCCESS;
}
