// The part of NVIDIA's nvml.h (API version 12; the event types, field
// values and recovery actions as API version 13 has them) that muster uses, declared
// exactly as nvml.h declares it: there is no nvml.h at build time (NVML is
// dlopened), and the NVML double in tests/nvml_double/ exports these same
// entry points. Names, values and struct layouts must not drift from
// nvml.h; nothing here is muster's own. One addition: each enum has int as
// its fixed underlying type (the size nvml.h's enums have on every ABI
// NVIDIA ships), so a value this header does not name (a newer NVML's, or
// garbage) is an int to check rather than undefined behaviour to load:
// without it, NVML_TOPOLOGY_SYSTEM = 50 makes 0..63 the only valid values,
// and UBSan stops the daemon on a level of 77.
#pragma once

// NOLINTBEGIN: NVIDIA's names, kept as they are.
extern "C" {

typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;

typedef enum nvmlReturn_enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_MIG_ENABLE 0x1
#define nvmlEventTypeSingleBitEccError 0x0000000000000001LL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002LL
#define nvmlEventTypePState 0x0000000000000004LL
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL
#define nvmlEventTypeClock 0x0000000000000010LL
#define nvmlEventTypeNone 0x0000000000000000LL
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230
#define NVML_NVLINK_MAX_LINKS 18

typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t, nvmlProcessInfo_t;

typedef enum nvmlEnableState_enum : int {
  NVML_FEATURE_DISABLED = 0,
  NVML_FEATURE_ENABLED = 1
} nvmlEnableState_t;

typedef enum nvmlComputeMode_enum : int {
  NVML_COMPUTEMODE_DEFAULT = 0,
  NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1,
  NVML_COMPUTEMODE_PROHIBITED = 2,
  NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3,
  NVML_COMPUTEMODE_COUNT
} nvmlComputeMode_t;

typedef enum nvmlMemoryErrorType_enum : int {
  NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,
  NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
  NVML_MEMORY_ERROR_TYPE_COUNT
} nvmlMemoryErrorType_t;

typedef enum nvmlEccCounterType_enum : int {
  NVML_VOLATILE_ECC = 0,
  NVML_AGGREGATE_ECC = 1,
  NVML_ECC_COUNTER_TYPE_COUNT
} nvmlEccCounterType_t;

typedef enum nvmlIntNvLinkDeviceType_enum : int {
  NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
  NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
  NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
  NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
} nvmlIntNvLinkDeviceType_t;

// (nvidia-smi topo -m's names for the levels in the comments: muster's.)
typedef enum nvmlGpuLevel_enum : int {
  NVML_TOPOLOGY_INTERNAL = 0,     // X: the same board
  NVML_TOPOLOGY_SINGLE = 10,      // PIX: one PCIe switch
  NVML_TOPOLOGY_MULTIPLE = 20,    // PXB: several switches, no host bridge
  NVML_TOPOLOGY_HOSTBRIDGE = 30,  // PHB: a host bridge
  NVML_TOPOLOGY_NODE = 40,        // NODE: host bridges of one NUMA node
  NVML_TOPOLOGY_SYSTEM = 50       // SYS: across sockets (SMP interconnect)
} nvmlGpuTopologyLevel_t;

typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

typedef enum nvmlValueType_enum : int {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  NVML_VALUE_TYPE_SIGNED_INT = 5,
  NVML_VALUE_TYPE_UNSIGNED_SHORT = 6,
  NVML_VALUE_TYPE_COUNT
} nvmlValueType_t;

typedef union nvmlValue_st {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  nvmlValueType_t valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
} nvmlFieldValue_t;

// What the driver asks for (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION's value).
typedef enum nvmlDeviceGpuRecoveryAction_s : int {
  NVML_GPU_RECOVERY_ACTION_NONE = 0,
  NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1,
  NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2,
  NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3,
  NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4
} nvmlDeviceGpuRecoveryAction_t;

}  // extern "C"
// NOLINTEND

// The entry points, as pointer types for dlsym (the signatures of nvml.h).
namespace muster::gpu::nvml_fn {
using Init = nvmlReturn_t (*)();
using Shutdown = nvmlReturn_t (*)();
using GetCount = nvmlReturn_t (*)(unsigned int*);
using GetHandleByIndex = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetString = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);  // Name, UUID
using GetPciInfo = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);
using GetMemoryInfo = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using GetNumaNodeId = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
using GetCpuAffinity = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, unsigned long*);
using GetComputeMode = nvmlReturn_t (*)(nvmlDevice_t, nvmlComputeMode_t*);
using GetMigMode = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
using GetProcesses = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
using GetTotalEccErrors = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemoryErrorType_t,
                                           nvmlEccCounterType_t, unsigned long long*);
using GetRetiredPagesPending = nvmlReturn_t (*)(nvmlDevice_t, nvmlEnableState_t*);
using GetRemappedRows = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*, unsigned int*,
                                         unsigned int*);
using EventSetCreate = nvmlReturn_t (*)(nvmlEventSet_t*);
using RegisterEvents = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
using EventSetWait = nvmlReturn_t (*)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);
using EventSetFree = nvmlReturn_t (*)(nvmlEventSet_t);
using GetSupportedEventTypes = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
using GetFieldValues = nvmlReturn_t (*)(nvmlDevice_t, int, nvmlFieldValue_t*);
using GetTopologyCommonAncestor = nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t,
                                                   nvmlGpuTopologyLevel_t*);
using GetNvLinkState = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlEnableState_t*);
using GetNvLinkRemotePciInfo = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlPciInfo_t*);
using GetNvLinkRemoteDeviceType = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                   nvmlIntNvLinkDeviceType_t*);
}  // namespace muster::gpu::nvml_fn
