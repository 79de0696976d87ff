#include "checkpoint/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <cinttypes>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/checksum.h"
#include "base/file.h"
#include "base/status_macros.h"

namespace cemb {
namespace {

namespace fs = std::filesystem;

// The size of an open file.
absl::StatusOr<uint64_t> FileBytes(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return base::ErrnoStatus(errno, path, "fstat");
  return static_cast<uint64_t>(st.st_size);
}

// The checksum of the first `bytes` of an open file, read with pread (the
// descriptor's offset is not used).
absl::StatusOr<uint64_t> ChecksumOpenFile(int fd, const std::string& path, uint64_t bytes,
                                          const std::atomic<bool>* stop) {
  // Aligned reads at aligned offsets, so that an O_DIRECT descriptor reads too.
  constexpr size_t kChunk = size_t{1} << 20, kAlign = 4096;
  std::unique_ptr<char, decltype(&std::free)> buffer(static_cast<char*>(std::aligned_alloc(kAlign, kChunk)), &std::free);
  Checksum64 sum;
  for (uint64_t offset = 0; offset < bytes;) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) {
      return absl::CancelledError(absl::StrCat(path, ": verification stopped"));
    }
    const ssize_t r = ::pread(fd, buffer.get(), kChunk, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      return base::ErrnoStatus(err, absl::StrCat(path, " at offset ", offset), "read");
    }
    if (r == 0) {
      return absl::DataLossError(absl::StrCat("checkpoint file ", path, " ended at ", offset, " of ", bytes,
                                              " bytes while it was verified"));
    }
    const uint64_t got = std::min<uint64_t>(static_cast<uint64_t>(r), bytes - offset);
    sum.Update(buffer.get(), got);
    offset += got;
    if (got % kAlign != 0 && offset < bytes) {
      return absl::DataLossError(absl::StrCat("checkpoint file ", path, ": short read at offset ", offset));
    }
  }
  return sum.Digest();
}

// Size and checksum of a whole file.
absl::StatusOr<CheckpointFile> Digest(const std::string& path, const std::string& name) {
  absl::StatusOr<base::File> file = base::File::OpenForReading(path);
  if (absl::IsNotFound(file.status())) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", path, " is missing"));
  }
  CEMB_RETURN_IF_ERROR(file.status());
  CheckpointFile f{.name = name};
  CEMB_ASSIGN_OR_RETURN(f.bytes, FileBytes(file->fd(), path));
  CEMB_ASSIGN_OR_RETURN(f.checksum, ChecksumOpenFile(file->fd(), path, f.bytes, nullptr));
  return f;
}

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

bool ParseStep(const std::string& name, int64_t* step) {
  return name.size() > 5 && name.rfind("step-", 0) == 0 && absl::SimpleAtoi(name.substr(5), step) && *step >= 0;
}

// The step-N directories under dir, oldest first.
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    int64_t step = 0;
    if (entry.is_directory(ec) && ParseStep(entry.path().filename().string(), &step)) {
      found.emplace_back(step, entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::string CheckpointName(int64_t step) { return absl::StrFormat("step-%09d", step); }

absl::StatusOr<std::string> WriteCheckpoint(
    const std::string& dir, const CheckpointState& state,
    const std::function<absl::Status(const std::string& payload_dir)>& write_payload, int keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create the checkpoint directory: ", ec.message()));
  const std::string name = CheckpointName(state.step);
  const std::string final_path = absl::StrCat(dir, "/", name);
  if (fs::exists(final_path, ec)) {
    return absl::AlreadyExistsError(absl::StrCat(final_path, ": a checkpoint of this step already exists"));
  }
  // Leftovers of an interrupted write.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(entry.path(), ec);
  }
  const std::string tmp = absl::StrCat(dir, "/.tmp-", name, "-", ::getpid());
  fs::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", ec.message()));

  auto fail = [&](absl::Status s) {
    fs::remove_all(tmp, ec);
    return s;
  };
  if (absl::Status s = write_payload(tmp); !s.ok()) return fail(s);

  // Checksum and fsync every file, fsync every directory.
  std::vector<CheckpointFile> files;
  std::vector<std::string> dirs{tmp};
  for (auto it = fs::recursive_directory_iterator(tmp, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string path = it->path().string();
    if (it->is_directory(ec)) {
      dirs.push_back(path);
      continue;
    }
    const std::string rel = fs::relative(it->path(), tmp).string();
    if (rel == kCheckpointManifest) return fail(absl::InternalError(absl::StrCat(path, ": reserved name")));
    if (rel.find('\n') != std::string::npos) return fail(absl::InternalError(absl::StrCat(path, ": bad file name")));
    absl::StatusOr<CheckpointFile> f = Digest(path, rel);
    if (!f.ok()) return fail(f.status());
    if (absl::Status s = base::FsyncPath(path); !s.ok()) return fail(s);
    files.push_back(*f);
  }
  if (ec) return fail(absl::InternalError(absl::StrCat(tmp, ": cannot list: ", ec.message())));
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.name < b.name; });

  std::string manifest = "cemb-checkpoint v1\n";
  absl::StrAppend(&manifest, "step ", state.step, "\n");
  absl::StrAppend(&manifest, "loader_position ", state.loader_position, "\n");
  for (const auto& [k, v] : state.state) absl::StrAppend(&manifest, "state ", k, " ", v, "\n");
  for (absl::string_view line : absl::StrSplit(state.config, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&manifest, "config ", line, "\n");
  }
  for (const CheckpointFile& f : files) {
    absl::StrAppend(&manifest, "file ", f.bytes, " ", Hex(f.checksum), " ", f.name, "\n");
  }
  Checksum64 sum;
  sum.Update(manifest.data(), manifest.size());
  absl::StrAppend(&manifest, "end ", Hex(sum.Digest()), "\n");
  if (absl::Status s = base::WriteFileAtomically(absl::StrCat(tmp, "/", kCheckpointManifest), manifest); !s.ok()) {
    return fail(s);
  }
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    if (absl::Status s = base::FsyncPath(*it); !s.ok()) return fail(s);
  }
  fs::rename(tmp, final_path, ec);
  if (ec) return fail(absl::InternalError(absl::StrCat(final_path, ": cannot rename into place: ", ec.message())));
  CEMB_RETURN_IF_ERROR(base::FsyncPath(dir));
  CEMB_RETURN_IF_ERROR(base::WriteFileAtomically(absl::StrCat(dir, "/LATEST"), name + "\n"));

  std::vector<std::pair<int64_t, std::string>> all = ListCheckpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < all.size(); ++i) {
    fs::remove_all(all[i].second, ec);
  }
  return final_path;
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such checkpoint directory"));
  }
  std::vector<std::pair<int64_t, std::string>> all = ListCheckpoints(dir);
  if (all.empty()) return absl::NotFoundError(absl::StrCat(dir, ": holds no checkpoint (no step-N directory)"));
  return all.back().second;
}

absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(absl::StrCat(path, "/", kCheckpointManifest), ec)) return path;
  std::string dir = path, latest = absl::StrCat(path, "/LATEST");
  if (fs::path(path).filename() == "LATEST" && fs::is_regular_file(path, ec)) {
    dir = fs::path(path).parent_path().string();
    latest = path;
  }
  if (fs::is_regular_file(latest, ec)) {
    CEMB_ASSIGN_OR_RETURN(std::string name, base::ReadWholeFile(latest));
    name = std::string(absl::StripAsciiWhitespace(name));
    int64_t step = 0;
    if (!ParseStep(name, &step)) {
      return absl::DataLossError(absl::StrCat(latest, ": '", name, "' is not the name of a checkpoint (step-N)"));
    }
    const std::string named = absl::StrCat(dir, "/", name);
    if (!fs::is_directory(named, ec)) {
      return absl::NotFoundError(absl::StrCat(latest, " names ", named, ", which does not exist"));
    }
    return named;
  }
  return LatestCheckpoint(dir);
}

absl::StatusOr<CheckpointState> ReadCheckpoint(const std::string& path,
                                               const std::function<bool(const std::string& name)>& verify) {
  const std::string manifest_path = absl::StrCat(path, "/", kCheckpointManifest);
  absl::StatusOr<std::string> read = base::ReadWholeFile(manifest_path);
  if (!read.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, " is incomplete or corrupt: ", manifest_path,
                                            " cannot be read (", read.status().message(), ")"));
  }
  const std::string& text = *read;
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest ", manifest_path, " is corrupt: ", why));
  };
  // The last line: "end <checksum of everything before it>".
  const size_t end_at = text.rfind("end ");
  if (end_at == std::string::npos || (end_at > 0 && text[end_at - 1] != '\n') || text.back() != '\n') {
    return corrupt("no end line (truncated?)");
  }
  Checksum64 sum;
  sum.Update(text.data(), end_at);
  const std::string expected(absl::StripAsciiWhitespace(absl::string_view(text).substr(end_at + 4)));
  if (expected != Hex(sum.Digest())) return corrupt("its checksum does not match its contents");

  CheckpointState state;
  bool have_step = false;
  std::vector<std::string> lines = absl::StrSplit(absl::string_view(text).substr(0, end_at), '\n', absl::SkipEmpty());
  if (lines.empty() || lines[0] != "cemb-checkpoint v1") return corrupt("unknown format (expected 'cemb-checkpoint v1')");
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const size_t sp = line.find(' ');
    const std::string key = line.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (key == "step") {
      if (!absl::SimpleAtoi(rest, &state.step) || state.step < 0) return corrupt(absl::StrCat("bad step '", rest, "'"));
      have_step = true;
    } else if (key == "loader_position") {
      state.loader_position = rest;
    } else if (key == "state") {
      const size_t sp2 = rest.find(' ');
      state.state[rest.substr(0, sp2)] = sp2 == std::string::npos ? "" : rest.substr(sp2 + 1);
    } else if (key == "config") {
      absl::StrAppend(&state.config, rest, "\n");
    } else if (key == "file") {
      std::vector<std::string> parts = absl::StrSplit(rest, absl::MaxSplits(' ', 2));
      CheckpointFile f;
      if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &f.bytes) ||
          !absl::SimpleHexAtoi(parts[1], &f.checksum) || parts[2].empty()) {
        return corrupt(absl::StrCat("bad file line '", line, "'"));
      }
      f.name = parts[2];
      state.files.push_back(f);
    } else {
      return corrupt(absl::StrCat("unknown record '", key, "'"));
    }
  }
  if (!have_step) return corrupt("no step");

  for (const CheckpointFile& f : state.files) {
    if (verify && !verify(f.name)) continue;
    const std::string file_path = absl::StrCat(path, "/", f.name);
    absl::StatusOr<base::File> file = base::File::OpenForReading(file_path);
    if (absl::IsNotFound(file.status())) {
      return absl::DataLossError(absl::StrCat("checkpoint file ", file_path, " is missing"));
    }
    CEMB_RETURN_IF_ERROR(file.status());
    CEMB_RETURN_IF_ERROR(VerifyOpenFile(file->fd(), file_path, f));
  }
  return state;
}

absl::Status VerifyOpenFile(int fd, const std::string& path, const CheckpointFile& expected,
                            const std::atomic<bool>* stop) {
  CEMB_ASSIGN_OR_RETURN(const uint64_t bytes, FileBytes(fd, path));
  if (bytes < expected.bytes) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", path, " is truncated: ", bytes,
                                            " bytes, the manifest says ", expected.bytes));
  }
  if (bytes > expected.bytes) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", path, " has grown: ", bytes,
                                            " bytes, the manifest says ", expected.bytes));
  }
  CEMB_ASSIGN_OR_RETURN(const uint64_t checksum, ChecksumOpenFile(fd, path, bytes, stop));
  if (checksum != expected.checksum) {
    return absl::DataLossError(
        absl::StrCat("checkpoint file ", path, " is corrupt: its checksum does not match the manifest"));
  }
  return absl::OkStatus();
}

}  // namespace cemb
