// Plan-once helpers over oneDNN 2.x. Not API.
//
// A `Call` is one primitive with its arguments bound at construction: the
// argument list is a prebuilt array of C handles, so executing it allocates
// nothing (the C++ `primitive::execute(stream, unordered_map)` builds a
// std::vector on every call). Memory objects whose buffer changes per step
// (the caller's input, say) are rebound with `set_data_handle`, which does not
// allocate either.
#ifndef CEMB_DLRM_INTERNAL_DNNL_CALL_H_
#define CEMB_DLRM_INTERNAL_DNNL_CALL_H_

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace cemb::dlrm::internal {

class Call {
 public:
  Call() = default;
  Call(dnnl::primitive prim, std::initializer_list<std::pair<int, dnnl::memory>> args)
      : prim_(std::move(prim)) {
    for (const auto& [arg, mem] : args) {
      mems_.push_back(mem);
      args_.push_back({arg, mem.get()});
    }
  }
  // Binds the shared user-mode scratchpad (see ScratchpadAttr()).
  void BindScratchpad(const dnnl::memory& scratchpad) {
    mems_.push_back(scratchpad);
    args_.push_back({DNNL_ARG_SCRATCHPAD, scratchpad.get()});
  }
  bool empty() const { return !prim_; }
  // Executes on `stream`; returns the oneDNN status (no exceptions).
  dnnl_status_t Execute(const dnnl::stream& stream) const {
    return dnnl_primitive_execute(prim_.get(), stream.get(),
                                  static_cast<int>(args_.size()), args_.data());
  }

 private:
  dnnl::primitive prim_;
  std::vector<dnnl::memory> mems_;  // keeps the handles in args_ alive
  std::vector<dnnl_exec_arg_t> args_;
};

// Primitive attributes with a user-managed scratchpad, so that oneDNN never
// allocates one during execution; the owner provides one buffer as large as
// the largest `pd.scratchpad_desc().get_size()` of its primitives.
inline dnnl::primitive_attr ScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

inline absl::Status DnnlStatus(dnnl_status_t status, const char* what) {
  if (status == dnnl_success) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("oneDNN failed in ", what, ": status ",
                                          static_cast<int>(status)));
}

inline absl::Status FromDnnlError(const dnnl::error& e, const std::string& what) {
  const absl::StatusCode code = e.status == dnnl_unimplemented
                                    ? absl::StatusCode::kUnimplemented
                                    : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(what, ": oneDNN: ", e.what()));
}

}  // namespace cemb::dlrm::internal

#endif  // CEMB_DLRM_INTERNAL_DNNL_CALL_H_
