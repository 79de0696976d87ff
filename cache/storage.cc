#include "cache/storage.h"

#include "absl/strings/str_cat.h"

namespace cemb {

const char* StorageKindName(StorageKind kind) {
  switch (kind) {
    case StorageKind::kDram: return "dram";
    case StorageKind::kSimple: return "simple";
    case StorageKind::kStatic: return "static";
    case StorageKind::kDynamic: return "dynamic";
    case StorageKind::kSsd: return "ssd";
  }
  return "?";
}

absl::StatusOr<StorageKind> ParseStorageKind(std::string_view name) {
  for (StorageKind k : {StorageKind::kDram, StorageKind::kSimple, StorageKind::kStatic, StorageKind::kDynamic,
                        StorageKind::kSsd}) {
    if (name == StorageKindName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown table storage '", std::string(name), "' (expected dram, simple, static, dynamic or ssd)"));
}

}  // namespace cemb
