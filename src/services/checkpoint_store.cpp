#include "services/checkpoint_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <sodium.h>

#include "outboard/clock.h"
#include "util/text.h"

namespace outboard::services::checkpoint {
namespace {

namespace wire = checkpoint_wire;
constexpr std::string_view kStepPrefix = "step-";
constexpr std::string_view kTmpPrefix = ".tmp-";
constexpr char kReserveFile[] = ".reserved";  // see reserved_bytes

Status os_error(const std::string& what, const std::string& path, int err = errno) {
  return {Code::kIoError, what + " " + path + ": " + std::strerror(err)};
}

double seconds_since(uint64_t t0) { return static_cast<double>(now_ns() - t0) / 1e9; }

// The step a checkpoint directory's name holds, if it is one.
bool parse_step(std::string_view name, uint64_t& step) {
  if (name.size() != kStepPrefix.size() + 12 || name.substr(0, kStepPrefix.size()) != kStepPrefix) return false;
  const char* first = name.data() + kStepPrefix.size();
  auto [end, ec] = std::from_chars(first, name.data() + name.size(), step);
  return ec == std::errc() && end == name.data() + name.size();
}

std::vector<std::string> entries(int dir_fd) {
  std::vector<std::string> names;
  const int fd = ::dup(dir_fd);
  if (fd < 0) return names;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return names;
  }
  ::rewinddir(d);  // a dup shares the offset, which the last listing left at the end
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(d);
  return names;
}

// What a checkpoint takes at least: its tensors and its state (headers and the manifest add a few KiB).
uint64_t incoming_bytes(const wire::Save& save) { return save.tensor_bytes() + save.state.size(); }

// Removes directory `name` of `dir_fd` and the files in it (a checkpoint holds no directories).
void remove_tree(int dir_fd, const std::string& name) {
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    for (const std::string& f : entries(fd)) ::unlinkat(fd, f.c_str(), 0);
    ::close(fd);
  }
  ::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR);
}

// Bytes of the files of checkpoint (step-*) `name` of a directory.
uint64_t step_bytes(int dir_fd, const std::string& name) {
  net::Fd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return 0;
  uint64_t total = 0;
  for (const std::string& f : entries(fd.get())) {
    struct stat st {};
    if (::fstatat(fd.get(), f.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      total += static_cast<uint64_t>(st.st_size);
  }
  return total;
}

// Bytes of the checkpoints of a directory.
uint64_t checkpoint_bytes(int dir_fd) {
  uint64_t total = 0;
  for (const std::string& name : entries(dir_fd)) {
    uint64_t step = 0;
    if (parse_step(name, step)) total += step_bytes(dir_fd, name);
  }
  return total;
}

// Bytes that the checkpoint being written in temporary directory `name` holds: under a home limit
// its writer keeps a sparse file there as long as the checkpoint, flock()ed while the writer lives.
// One a dead writer left holds nothing (its lock is free; reopening the directory removes it).
uint64_t reserved_bytes(int dir_fd, const std::string& name) {
  net::Fd tmp(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!tmp.valid()) return 0;
  net::Fd f(::openat(tmp.get(), kReserveFile, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!f.valid() || ::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  if (::flock(f.get(), LOCK_SH | LOCK_NB) == 0) return 0;  // no writer holds it (closing unlocks)
  return static_cast<uint64_t>(st.st_size);
}

// Bytes of the checkpoints in a directory and in every directory below it, `depth` levels down
// (links not followed), with those being written: one listing per directory.
uint64_t tree_bytes(int dir_fd, size_t depth) {
  uint64_t total = 0;
  for (const std::string& name : entries(dir_fd)) {
    uint64_t step = 0;
    if (parse_step(name, step)) {
      total += step_bytes(dir_fd, name);
    } else if (name.starts_with(kTmpPrefix)) {
      total += reserved_bytes(dir_fd, name);
    } else if (depth > 0) {
      net::Fd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (fd.valid()) total += tree_bytes(fd.get(), depth - 1);  // else a file, or a link
    }
  }
  return total;
}

Status write_all(int fd, std::span<const uint8_t> bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error("cannot write", path);
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return {};
}

std::string to_hex(std::span<const uint8_t> bytes) {
  std::string hex(2 * bytes.size() + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), bytes.data(), bytes.size());
  hex.pop_back();
  return hex;
}

// A home's lock (flock of its directory), held while a writer counts the home's bytes and reserves
// its own, and while one trades its reservation for the checkpoint it renames into place: writers
// in other processes count one or the other, never neither.
class HomeLock {
 public:
  static Result<HomeLock> take(const net::Fd& home, const std::string& path) {
    if (!home.valid()) return HomeLock(-1);
    while (::flock(home.get(), LOCK_EX) != 0)
      if (errno != EINTR) return os_error("cannot lock", path);
    return HomeLock(home.get());
  }
  HomeLock(HomeLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  HomeLock& operator=(HomeLock&&) = delete;
  ~HomeLock() {
    if (fd_ >= 0) ::flock(fd_, LOCK_UN);
  }

 private:
  explicit HomeLock(int fd) : fd_(fd) {}
  int fd_;
};

// SHA-256 through OpenSSL: its SHA-NI code hashes 1.4 GB/s here, libsodium's portable C 0.19 GB/s.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::span<const uint8_t> b) { EVP_DigestUpdate(ctx_, b.data(), b.size()); }
  std::string hex() {
    uint8_t digest[32];
    unsigned n = 0;
    EVP_DigestFinal_ex(ctx_, digest, &n);
    return to_hex({digest, n});
  }

 private:
  EVP_MD_CTX* ctx_;
};

// A file of the checkpoint being written: created exclusively, hashed as it is written, fsynced.
class File {
 public:
  static Result<File> create(int dir_fd, const std::string& dir, const char* name) {
    File f;
    f.path_ = dir + "/" + name;
    f.fd_ = net::Fd(::openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!f.fd_.valid()) return os_error("cannot create", f.path_);
    return f;
  }
  Status write(std::span<const uint8_t> bytes, Written& t) {
    uint64_t t0 = now_ns();
    sha_->update(bytes);
    t.hash_s += seconds_since(t0);
    t0 = now_ns();
    Status st = write_all(fd_.get(), bytes, path_);
    t.write_s += seconds_since(t0);
    bytes_ += bytes.size();
    return st;
  }
  Status write(std::string_view text, Written& t) { return write({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, t); }
  // fsync, close; the entry the manifest lists.
  Result<nlohmann::json> finish(Written& t) {
    const uint64_t t0 = now_ns();
    if (::fsync(fd_.get()) != 0) return os_error("cannot fsync", path_);
    if (::close(fd_.release()) != 0) return os_error("cannot close", path_);
    t.write_s += seconds_since(t0);
    t.bytes += bytes_;
    return nlohmann::json{{"bytes", bytes_}, {"sha256", sha_->hex()}};
  }

 private:
  File() : sha_(std::make_unique<Sha256>()) {}
  net::Fd fd_;
  std::string path_;
  std::unique_ptr<Sha256> sha_;
  uint64_t bytes_ = 0;
};

// safetensors' header: each tensor's dtype, shape and data offsets (laid out in the order given,
// back to back), padded with spaces to a multiple of 8 bytes as the reference writer does.
std::string safetensors_header(const wire::Save& save) {
  nlohmann::ordered_json h;
  h["__metadata__"] = {{"format", "np"}, {"step", std::to_string(save.step)}};
  uint64_t at = 0;
  for (const wire::Tensor& t : save.tensors) {
    h[t.name] = {{"dtype", wire::dtype_name(t.dtype)}, {"shape", t.dims}, {"data_offsets", {at, at + t.bytes}}};
    at += t.bytes;
  }
  std::string text = h.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  const uint64_t n = text.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + text;
}

}  // namespace

std::string step_name(uint64_t step) {
  std::string digits = std::to_string(step);
  return std::string(kStepPrefix) + std::string(digits.size() < 12 ? 12 - digits.size() : 0, '0') + digits;
}

std::string tenant_dir(std::string_view identity) {
  std::string name;
  for (char c : identity.substr(0, 64))
    name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '=' ? c : '_';
  const size_t first = name.find_first_not_of("_.");
  Sha256 sha;
  sha.update({reinterpret_cast<const uint8_t*>(identity.data()), identity.size()});
  return "tenants/" + (first == std::string::npos ? std::string() : name.substr(first) + "-") + sha.hex().substr(0, 16);
}

Result<std::unique_ptr<Directory>> Directory::open(const std::string& root, const std::string& dir,
                                                   uint32_t keep_last, Limits limits, const std::string& home) {
  namespace fs = std::filesystem;
  if (root.empty())
    return Status(Code::kBadConfig, "checkpoint: the agent was started without --checkpoint-root, the directory "
                                    "its checkpoints may go under");
  std::error_code ec;
  const fs::path base = fs::canonical(root, ec);
  if (ec || !fs::is_directory(base, ec))
    return Status(Code::kBadConfig, "checkpoint: --checkpoint-root " + root + " is not a directory");
  const fs::path inside = (base / home).lexically_normal();
  const fs::path asked = fs::path(dir).lexically_normal();
  fs::path rel = asked.is_absolute() ? asked.lexically_relative(inside) : asked;
  if (rel.empty() || *rel.begin() == ".." || rel.is_absolute() ||
      std::any_of(rel.begin(), rel.end(), [](const fs::path& p) { return p == ".."; }))
    return Status(Code::kInvalidArgument,
                  "checkpoint: directory " + quote(dir, 256) + " is not inside " +
                      (home.empty() ? "the agent's --checkpoint-root " + base.string()
                                    : "this client's own directory " + inside.string() +
                                          " (its TLS identity's, under the agent's --checkpoint-root)"));
  const auto depth = static_cast<size_t>(
      std::count_if(rel.begin(), rel.end(), [](const fs::path& p) { return !p.empty() && p != "."; }));
  if (depth > kMaxDirDepth)
    return Status(Code::kInvalidArgument, "checkpoint: directory " + quote(dir, 256) + " lies " +
                                              std::to_string(depth) + " levels down, over kMaxDirDepth " +
                                              std::to_string(kMaxDirDepth));
  // Down from the root one component at a time, refusing links: nothing leads out of it.
  net::Fd fd(::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return os_error("cannot open", base.string());
  fs::path path = base;
  const fs::path home_path(home);
  const fs::path walk = home_path / rel;
  const auto home_parts = std::distance(home_path.begin(), home_path.end());
  net::Fd home_fd;  // for the home's limit
  ptrdiff_t at = 0;
  for (const fs::path& part : walk) {
    if (at++ == home_parts && limits.max_home_bytes != 0) home_fd = net::Fd(::dup(fd.get()));
    if (part == "." || part.empty()) continue;
    path /= part;
    if (::mkdirat(fd.get(), part.c_str(), 0755) != 0 && errno != EEXIST) return os_error("cannot create", path.string());
    net::Fd next(::openat(fd.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid())
      return errno == ELOOP || errno == ENOTDIR
                 ? Status(Code::kInvalidArgument, "checkpoint: " + path.string() + " is a link or not a directory")
                 : os_error("cannot open", path.string());
    fd = std::move(next);
  }
  net::Fd lock(::openat(fd.get(), kLockFile, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!lock.valid()) return os_error("cannot open", (path / kLockFile).string());
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0)
    return errno == EWOULDBLOCK ? Status(Code::kBadState, "checkpoint: directory " + path.string() +
                                                              " is in use by another checkpointer (it holds " +
                                                              kLockFile + ")")
                                : os_error("cannot lock", (path / kLockFile).string());
  // A token in the lock file: a client that finds it there reads this directory (token()).
  [[maybe_unused]] static const int sodium = sodium_init();  // randombytes_buf is thread-safe after it
  uint8_t random[16];
  randombytes_buf(random, sizeof random);
  std::string token = to_hex(random);
  if (::ftruncate(lock.get(), 0) != 0 ||
      ::pwrite(lock.get(), token.data(), token.size(), 0) != static_cast<ssize_t>(token.size()))
    return os_error("cannot write", (path / kLockFile).string());
  // Whoever wrote these is gone: the lock was free.
  for (const std::string& name : entries(fd.get()))
    if (name.starts_with(kTmpPrefix)) remove_tree(fd.get(), name);
  return std::unique_ptr<Directory>(
      new Directory(std::move(fd), std::move(lock), std::move(home_fd), path.string(), inside.string(),
                    std::move(token), keep_last, limits));
}

// What a Writer holds: the temporary directory and the tensors file being written into it.
struct Writer::Impl {
  Directory& dir;
  uint64_t step = 0;
  size_t tensors = 0;
  std::string state;  // the JSON the manifest holds
  std::string name, tmp, tmp_path;
  net::Fd tmp_fd;
  net::Fd reserved;          // the home's room it holds (kReserveFile), under a home limit
  std::optional<File> file;  // tensors.safetensors, until finished
  Written out;
  bool renamed = false;

  explicit Impl(Directory& d) : dir(d) {}
  // The manifest next to the tensors, then everything durable and renamed into place.
  Status finish();
};

Result<std::unique_ptr<Writer>> Directory::begin(const wire::Save& save) {
  auto impl = std::make_unique<Writer::Impl>(*this);
  impl->step = save.step;
  impl->tensors = save.tensors.size();
  impl->name = step_name(save.step);
  impl->out.path = path_ + "/" + impl->name;
  struct stat st {};
  if (::fstatat(fd_.get(), impl->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
    return Status(Code::kBadState, "checkpoint: " + impl->out.path + " exists; a step is saved once");
  OB_ASSIGN_OR_RETURN(HomeLock home, HomeLock::take(home_, home_path_));
  OB_RETURN_IF_ERROR(check_room(save, impl->out.path));
  impl->tmp = std::string(kTmpPrefix) + impl->name;
  impl->tmp_path = path_ + "/" + impl->tmp;
  remove_tree(fd_.get(), impl->tmp);
  if (::mkdirat(fd_.get(), impl->tmp.c_str(), 0755) != 0) return os_error("cannot create", impl->tmp_path);
  // From here the Writer owns the temporary directory: its destructor removes it on any error.
  std::unique_ptr<Writer> writer(new Writer(std::move(impl), save.tensor_bytes()));
  Writer::Impl& w = *writer->impl_;
  w.state = save.state;
  w.tmp_fd = net::Fd(::openat(fd_.get(), w.tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!w.tmp_fd.valid()) return os_error("cannot open", w.tmp_path);
  if (home_.valid()) {
    w.reserved = net::Fd(
        ::openat(w.tmp_fd.get(), kReserveFile, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!w.reserved.valid() || ::flock(w.reserved.get(), LOCK_EX | LOCK_NB) != 0 ||
        ::ftruncate(w.reserved.get(), static_cast<off_t>(incoming_bytes(save))) != 0)
      return os_error("cannot reserve room in", w.tmp_path);
  }
  OB_ASSIGN_OR_RETURN(File f, File::create(w.tmp_fd.get(), w.tmp_path, kTensorsFile));
  OB_RETURN_IF_ERROR(f.write(safetensors_header(save), w.out));
  w.file.emplace(std::move(f));
  return writer;
}

Writer::Writer(std::unique_ptr<Impl> impl, uint64_t total) : impl_(std::move(impl)), total_(total) {}

Writer::~Writer() {
  if (!impl_->renamed) remove_tree(impl_->dir.fd_.get(), impl_->tmp);
}

Status Writer::append(std::span<const uint8_t> bytes) {
  if (!impl_->file) return Status(Code::kBadState, "checkpoint: step " + std::to_string(impl_->step) + " is finished");
  if (bytes.size() > total_ - written_)
    return Status(Code::kOutOfRange, "checkpoint: " + std::to_string(bytes.size()) + " B at " +
                                         std::to_string(written_) + " run past the tensors' " +
                                         std::to_string(total_) + " B of step " + std::to_string(impl_->step));
  OB_RETURN_IF_ERROR(impl_->file->write(bytes, impl_->out));
  written_ += bytes.size();
  return {};
}

Result<Written> Writer::finish() {
  if (written_ != total_)
    return Status(Code::kBadState, "checkpoint: step " + std::to_string(impl_->step) + " holds " +
                                       std::to_string(written_) + " of its tensors' " + std::to_string(total_) + " B");
  if (!impl_->file) return Status(Code::kBadState, "checkpoint: step " + std::to_string(impl_->step) + " is finished");
  OB_RETURN_IF_ERROR(impl_->finish());
  impl_->out.pruned = impl_->dir.prune();
  return impl_->out;
}

Status Writer::Impl::finish() {
  nlohmann::ordered_json files;
  OB_ASSIGN_OR_RETURN(files[kTensorsFile], file->finish(out));
  file.reset();
  nlohmann::ordered_json manifest;
  manifest["format"] = kFormat;
  manifest["version"] = kFormatVersion;
  manifest["step"] = step;
  manifest["files"] = std::move(files);
  manifest["tensors"] = tensors;
  manifest["state"] = nlohmann::ordered_json::parse(state);  // decode_save checked it
  OB_ASSIGN_OR_RETURN(File m, File::create(tmp_fd.get(), tmp_path, kManifestFile));
  OB_RETURN_IF_ERROR(m.write(manifest.dump(1), out));
  OB_RETURN_IF_ERROR(m.finish(out).status());
  OB_ASSIGN_OR_RETURN(HomeLock home, HomeLock::take(dir.home_, dir.home_path_));
  if (reserved.valid() && ::unlinkat(tmp_fd.get(), kReserveFile, 0) != 0)
    return os_error("cannot remove", tmp_path + "/" + kReserveFile);
  if (::fsync(tmp_fd.get()) != 0) return os_error("cannot fsync", tmp_path);
  if (::renameat(dir.fd_.get(), tmp.c_str(), dir.fd_.get(), name.c_str()) != 0)
    return os_error("cannot rename " + tmp_path + " to", out.path);
  renamed = true;
  if (::fsync(dir.fd_.get()) != 0) return os_error("cannot fsync", dir.path_);
  return {};
}

Result<Written> Directory::write(const wire::Save& save, const Source& source) {
  OB_ASSIGN_OR_RETURN(auto writer, begin(save));
  std::vector<uint8_t> scratch;
  double read_s = 0;
  for (const wire::Tensor& t : save.tensors) {
    for (uint64_t done = 0; done < t.bytes;) {
      const uint64_t n = std::min(kPieceBytes, t.bytes - done);
      if (scratch.size() < n) scratch.resize(n);
      const uint64_t t0 = now_ns();
      auto piece = source(t.offset + done, {scratch.data(), n});
      read_s += seconds_since(t0);
      if (!piece.ok()) return piece.status().with_context("checkpoint: reading tensor " + quote(t.name, 256));
      OB_RETURN_IF_ERROR(writer->append(piece.value()));
      done += n;
    }
  }
  OB_ASSIGN_OR_RETURN(Written out, writer->finish());
  out.read_s = read_s;
  return out;
}

Status Directory::check_room(const wire::Save& save, const std::string& final_path) const {
  const uint64_t incoming = incoming_bytes(save);
  const std::string takes = "checkpoint: " + final_path + " takes at least " + std::to_string(incoming) + " B";
  if (limits_.max_dir_bytes != 0) {
    const uint64_t held = checkpoint_bytes(fd_.get());  // listed per save, only where limited
    if (held > limits_.max_dir_bytes || incoming > limits_.max_dir_bytes - held)
      return Status(Code::kTooBig, takes + " and " + path_ + " holds " + std::to_string(held) +
                                       " B, over --checkpoint-max-dir-bytes " + std::to_string(limits_.max_dir_bytes) +
                                       " B (a smaller keep_last keeps fewer)");
  }
  if (limits_.max_home_bytes != 0) {
    const uint64_t held = home_.valid() ? tree_bytes(home_.get(), kMaxDirDepth) : 0;
    if (held > limits_.max_home_bytes || incoming > limits_.max_home_bytes - held)
      return Status(Code::kTooBig, takes + " and this client's directories under " + home_path_ + " hold " +
                                       std::to_string(held) + " B (with the checkpoints being written), over "
                                       "--checkpoint-max-client-bytes " +
                                       std::to_string(limits_.max_home_bytes) + " B");
  }
  if (limits_.min_free_pct != 0) {
    struct statvfs fs {};
    if (::fstatvfs(fd_.get(), &fs) != 0) return os_error("cannot read the free space of", path_);
    const uint64_t avail = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    const uint64_t size = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
    const auto keep = static_cast<uint64_t>(static_cast<unsigned __int128>(size) * limits_.min_free_pct / 100);
    if (avail < keep || incoming > avail - keep)
      return Status(Code::kTooBig, takes + " and the filesystem of " + path_ + " has " + std::to_string(avail) +
                                       " B free, of which --checkpoint-min-free-pct keeps " +
                                       std::to_string(limits_.min_free_pct) + "% (" + std::to_string(keep) + " B)");
  }
  return Status();
}

std::vector<uint64_t> Directory::steps() const {
  std::vector<uint64_t> steps;
  for (const std::string& name : entries(fd_.get()))
    if (uint64_t step = 0; parse_step(name, step)) steps.push_back(step);
  std::sort(steps.begin(), steps.end());
  return steps;
}

Result<Buffer> Directory::read(uint64_t step, wire::File file, uint64_t offset, uint32_t length) const {
  const std::string checkpoint = step_name(step);
  const char* file_name = file == wire::File::kTensors ? kTensorsFile : kManifestFile;
  const std::string path = path_ + "/" + checkpoint + "/" + file_name;
  const auto refused = [&](int err) -> Status {
    if (err == ENOENT || err == ELOOP || err == ENOTDIR)
      return {Code::kNotFound, "checkpoint: " + path + " is missing or not a regular file"};
    return os_error("cannot open", path, err);
  };
  net::Fd dir(::openat(fd_.get(), checkpoint.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return refused(errno);
  // O_NONBLOCK: a FIFO put in its place must not hold the worker (a regular file ignores the flag).
  net::Fd f(::openat(dir.get(), file_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!f.valid()) return refused(errno);
  struct stat st {};
  if (::fstat(f.get(), &st) != 0) return os_error("cannot read", path);
  if (!S_ISREG(st.st_mode)) return refused(ENOENT);
  const auto size = static_cast<uint64_t>(st.st_size);
  const size_t want = offset >= size ? 0 : std::min<uint64_t>(length, size - offset);
  Buffer answer(8 + want);
  std::memcpy(answer.data(), &size, 8);
  for (size_t done = 0; done < want;) {
    const ssize_t n = ::pread(f.get(), answer.data() + 8 + done, want - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return os_error("cannot read", path);
    if (n == 0) {  // shorter than fstat said: a checkpoint's files never change, so it was damaged
      Buffer shorter(8 + done);
      std::memcpy(shorter.data(), answer.data(), shorter.size());
      return shorter;
    }
    done += static_cast<size_t>(n);
  }
  return answer;
}

uint32_t Directory::prune() {
  if (keep_last_ == 0) return 0;
  std::vector<std::pair<uint64_t, std::string>> steps;
  for (std::string& name : entries(fd_.get())) {
    uint64_t step = 0;
    if (parse_step(name, step)) steps.emplace_back(step, std::move(name));
  }
  if (steps.size() <= keep_last_) return 0;
  std::sort(steps.begin(), steps.end());
  const size_t drop = steps.size() - keep_last_;
  for (size_t i = 0; i < drop; ++i) remove_tree(fd_.get(), steps[i].second);
  ::fsync(fd_.get());
  return static_cast<uint32_t>(drop);
}

}  // namespace outboard::services::checkpoint
