#include "ssd/ssd_table.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace cemb {

std::string SsdStats::ToString(int64_t row_bytes) const {
  return absl::StrFormat(
      "prefetch rows %d, hit rate %.3f, fetched %d (from write buffers %d), lazy %d, sync fetches %d, evictions %d "
      "(dirty %d), block reads %d (of a block read for the 4 batches before: %d), rows from a block read for others %d, "
      "rows written %d, "
      "segments written %d, collector: %d read, %d freed unread, %d rows moved; "
      "blocks read %d, bytes written %d, write amplification %.2f, live rows %d, file %d bytes, requests %d, "
      "queue depth %.1f, cpu %.1f us/request, waited %s",
      prefetch_rows, hit_rate(), fetched_rows, buffer_rows, lazy_rows, sync_fetches, evictions, dirty_evictions,
      fetch_reads, fetch_rereads, shared_rows, rows_written, segments_written, gc_segments, gc_freed, gc_rows_moved,
      io.blocks_read(), io.bytes_written,
      write_amplification(row_bytes), live_rows, file_bytes, requests(), io.average_queue_depth(),
      cpu_us_per_request(), absl::FormatDuration(waited));
}

int64_t SsdFixedDramBytes(int64_t nvectors, int64_t row_bytes, const SsdOptions& options, bool evicts) {
  using Core = ssd_internal::SsdCore;
  const LogLayout log = LogLayout::For(nvectors, row_bytes, options.file_space, Core::kReserveSegments,
                                       options.segment_bytes);
  constexpr int64_t kPerSegment = 1 + 4 + 4 + 4;  // state, live copies, reads in flight, buffer
  const int64_t buffers = evicts ? (Core::kWriteBuffers + Core::kMaxCollecting) * log.segment_bytes : 0;
  return 4 * nvectors + kPerSegment * log.nsegments + buffers;
}

}  // namespace cemb

#define CEMB_SSD_INSTANTIATE(...) template class __VA_ARGS__;
CEMB_FOR_EACH_TABLE_TYPE(CEMB_SSD_INSTANTIATE, ::cemb::SsdTable)
#undef CEMB_SSD_INSTANTIATE
