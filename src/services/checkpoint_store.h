#pragma once
// A checkpoint directory on the agent's disk: each checkpoint a directory `step-<12 digits>`
// holding tensors.safetensors (safetensors: what other tools read) and manifest.json (every file's
// size and sha256, and the state's non-tensor part), written under a temporary name, made durable
// (files, then directories, fsynced) and renamed into place, so a crash leaves either the whole
// checkpoint or none. The directory is locked while open: one writer at a time.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "outboard/buffer.h"
#include "outboard/status.h"
#include "services/checkpoint_wire.h"
#include "util/net.h"

namespace outboard::services::checkpoint {

inline constexpr char kTensorsFile[] = "tensors.safetensors";
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kLockFile[] = ".outboard-lock";
/// What a checkpoint's manifest says it is.
inline constexpr char kFormat[] = "outboard-checkpoint";
inline constexpr int kFormatVersion = 1;
/// Bytes read from the staging region per piece (and what a piece of the file is hashed and
/// written in).
inline constexpr uint64_t kPieceBytes = 8ull << 20;
/// Components of a directory a client names, below the root or its home: what a count of a home's
/// checkpoints walks down to.
inline constexpr size_t kMaxDirDepth = 32;

/// "step-000000000042": zero-padded so names sort as steps do.
std::string step_name(uint64_t step);

/// Where a TLS client's directories go under the root: "tenants/<its identity, spelled for a file
/// name>-<16 hex digits of its SHA-256>" (the digest keeps identities that spell alike apart).
std::string tenant_dir(std::string_view identity);

/// Bytes [offset, offset + scratch.size()) of the staging region: a view of memory mapped here,
/// or `scratch` filled.
using Source = std::function<Result<std::span<const uint8_t>>(uint64_t offset, std::span<uint8_t> scratch)>;

/// What one checkpoint directory may take of the disk, checked before a checkpoint is written
/// against its tensors' and state's bytes (headers and the manifest add a few KiB more).
struct Limits {
  uint64_t max_dir_bytes = 0;  ///< its checkpoints with the one being written; 0: no limit
  uint32_t min_free_pct = 0;   ///< of its filesystem, what must stay free after the checkpoint
  /// the checkpoints of every directory under its home (a tenant's), with the one being written
  /// and those being written in its other directories, by any process; 0: no limit
  uint64_t max_home_bytes = 0;
};

struct Written {
  std::string path;     // the checkpoint's directory
  uint64_t bytes = 0;   // of its files
  double read_s = 0;    // reading the staging region
  double hash_s = 0;
  double write_s = 0;   // writing and fsync
  uint32_t pruned = 0;  // older checkpoints removed for keep_last
};

class Directory;

/// One checkpoint being written (Directory::begin): fed its tensors' bytes in table order, then
/// finished, made durable and renamed into place. Destroyed unfinished, it leaves nothing.
/// Thread mode: the directory's writer thread only; its Directory outlives it.
class Writer {
 public:
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  /// The next bytes of the tensors, in table order (they may straddle tensors); kOutOfRange,
  /// nothing written, past the last tensor's end.
  Status append(std::span<const uint8_t> bytes);
  [[nodiscard]] uint64_t written() const { return written_; }
  [[nodiscard]] uint64_t total() const { return total_; }
  /// Once every tensor byte is in (else kBadState): the manifest, fsyncs, the rename, the pruning.
  Result<Written> finish();

 private:
  friend class Directory;
  struct Impl;
  Writer(std::unique_ptr<Impl> impl, uint64_t total);
  std::unique_ptr<Impl> impl_;
  uint64_t total_ = 0;
  uint64_t written_ = 0;
};

class Directory {
 public:
  /// `dir` (absolute, or relative to root/home) must lie inside root/home, where `root` is an
  /// existing directory and `home` a relative path in it (a tenant's, or empty); the missing parts
  /// of both are made, none of them may be a symbolic link, and `dir` is locked (kBadState when
  /// another writer holds it). Temporary directories a crashed writer left are removed.
  static Result<std::unique_ptr<Directory>> open(const std::string& root, const std::string& dir, uint32_t keep_last,
                                                 Limits limits = {}, const std::string& home = {});

  /// Starts checkpoint `save.step` (kBadState if it exists; kTooBig, before writing, if it would break
  /// a limit). On any error, here or in the Writer, nothing of it remains and earlier checkpoints
  /// are untouched.
  Result<std::unique_ptr<Writer>> begin(const checkpoint_wire::Save& save);
  /// begin(), every tensor read from `source` at its offset, finish().
  Result<Written> write(const checkpoint_wire::Save& save, const Source& source);
  /// The steps of the checkpoints it holds, ascending.
  [[nodiscard]] std::vector<uint64_t> steps() const;
  /// A Read's answer: the file's size (u64), then up to `length` of its bytes at `offset` (none past
  /// its end), read straight into the answer; kNotFound naming the file when it or the checkpoint is
  /// missing (or not a regular file).
  Result<Buffer> read(uint64_t step, checkpoint_wire::File file, uint64_t offset, uint32_t length) const;
  [[nodiscard]] const std::string& path() const { return path_; }
  /// 32 random hex digits that open() wrote into the directory's lock file: a client that reads
  /// them there shares this directory (rather than another host's at the same path).
  [[nodiscard]] const std::string& token() const { return token_; }

 private:
  Directory(net::Fd fd, net::Fd lock, net::Fd home, std::string path, std::string home_path, std::string token,
            uint32_t keep_last, Limits limits)
      : fd_(std::move(fd)),
        lock_(std::move(lock)),
        home_(std::move(home)),
        path_(std::move(path)),
        home_path_(std::move(home_path)),
        token_(std::move(token)),
        keep_last_(keep_last),
        limits_(limits) {}
  friend class Writer;
  Status check_room(const checkpoint_wire::Save& save, const std::string& final_path) const;
  uint32_t prune();

  net::Fd fd_;
  net::Fd lock_;  // flock()ed: closing it releases the directory
  net::Fd home_;  // where limits_.max_home_bytes counts, when set
  std::string path_;
  std::string home_path_;
  std::string token_;
  uint32_t keep_last_ = 0;
  Limits limits_;
};

}  // namespace outboard::services::checkpoint
