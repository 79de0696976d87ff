#include "cache/storage.h"

#include "absl/strings/str_cat.h"

namespace cemb {

}  // namespace cemb
