// The checkpoint service's store and wire format, without an agent (tests/python/test_checkpoint.py
// drives the service through real agents).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>
#include <utility>

#include "../agent_fixture.h"
#include "services/checkpoint_store.h"
#include "services/checkpoint_wire.h"

namespace outboard::services {
namespace {

namespace fs = std::filesystem;
namespace wire = checkpoint_wire;
using checkpoint::Directory;
using checkpoint::Limits;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/outboard-ck-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    staging_.resize(4096);
    std::iota(staging_.begin(), staging_.end(), uint8_t{0});
  }
  void TearDown() override { fs::remove_all(root_); }

  // Two tensors from the staging bytes: "w" F32 [2,3] at 64, "b" I64 [2] at 256.
  wire::Save save(uint64_t step) const {
    wire::Save s;
    s.step = step;
    s.tensors = {{"w", wire::Dtype::kF32, {2, 3}, 64, 24}, {"b", wire::Dtype::kI64, {2}, 256, 16}};
    s.state = R"({"dict":[["epoch",{"v":1}]]})";
    return s;
  }
  checkpoint::Source source() const {
    return [this](uint64_t offset, std::span<uint8_t> scratch) -> Result<std::span<const uint8_t>> {
      std::memcpy(scratch.data(), staging_.data() + offset, scratch.size());
      return std::span<const uint8_t>(scratch);
    };
  }
  // The bytes of save(1)'s checkpoint on disk (its files), written in a directory of its own.
  uint64_t checkpoint_size() const {
    auto probe = Directory::open(root_, "probe", 0);
    EXPECT_TRUE(probe.ok() && probe.value()->write(save(1), source()).ok());
    const fs::path one = fs::path(root_) / "probe/step-000000000001";
    return fs::file_size(one / checkpoint::kTensorsFile) + fs::file_size(one / checkpoint::kManifestFile);
  }
  std::vector<std::string> steps(const fs::path& dir) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string root_;
  std::vector<uint8_t> staging_;
};

TEST_F(CheckpointStoreTest, WritesSafetensorsAndAManifestThenPrunesToKeepLast) {
  auto dir = Directory::open(root_, "run/a", 2);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  for (uint64_t step : {5, 6, 7}) {
    auto w = dir.value()->write(save(step), source());
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_EQ(w->pruned, step == 7 ? 1u : 0u);
  }
  const fs::path run = fs::path(root_) / "run/a";
  EXPECT_EQ(steps(run), (std::vector<std::string>{".outboard-lock", "step-000000000006", "step-000000000007"}));
  const std::string st = read(run / "step-000000000007" / checkpoint::kTensorsFile);
  uint64_t n = 0;
  std::memcpy(&n, st.data(), 8);
  ASSERT_EQ((8 + n) % 8, 0u);
  auto header = nlohmann::json::parse(st.substr(8, n));
  EXPECT_EQ(header["w"]["dtype"], "F32");
  EXPECT_EQ(header["w"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(header["w"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({24, 40}));
  ASSERT_EQ(st.size(), 8 + n + 40);
  EXPECT_EQ(0, std::memcmp(st.data() + 8 + n, staging_.data() + 64, 24));
  EXPECT_EQ(0, std::memcmp(st.data() + 8 + n + 24, staging_.data() + 256, 16));
  auto manifest = nlohmann::json::parse(read(run / "step-000000000007" / checkpoint::kManifestFile));
  EXPECT_EQ(manifest["format"], checkpoint::kFormat);
  EXPECT_EQ(manifest["step"], 7);
  EXPECT_EQ(manifest["files"][checkpoint::kTensorsFile]["bytes"], st.size());
  EXPECT_EQ(manifest["files"][checkpoint::kTensorsFile]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(manifest["state"]["dict"][0][0], "epoch");
}

TEST_F(CheckpointStoreTest, OneWriterPerDirectoryUntilItCloses) {
  auto first = Directory::open(root_, "run", 3);
  ASSERT_TRUE(first.ok());
  auto second = Directory::open(root_, root_ + "/run", 3);
  EXPECT_EQ(second.status().code(), Code::kBadState);
  EXPECT_NE(second.status().message().find("in use by another checkpointer"), std::string::npos);
  first.value().reset();
  EXPECT_TRUE(Directory::open(root_, "run", 3).ok());
}

TEST_F(CheckpointStoreTest, NothingOutsideTheRootAndNoLinks) {
  for (const char* bad : {"../x", "/etc", "a/../../x", ""}) {
    auto d = Directory::open(root_, bad, 1);
    EXPECT_EQ(d.status().code(), Code::kInvalidArgument) << bad;
  }
  fs::create_directory_symlink("/tmp", fs::path(root_) / "link");
  auto d = Directory::open(root_, "link/x", 1);
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
  EXPECT_NE(d.status().message().find("is a link"), std::string::npos);
  EXPECT_EQ(Directory::open("", "x", 1).status().code(), Code::kBadConfig);
}

TEST_F(CheckpointStoreTest, AFailedWriteLeavesNothingAndEarlierCheckpointsIntact) {
  auto dir = Directory::open(root_, "run", 0);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir.value()->write(save(1), source()).ok());
  const fs::path run = fs::path(root_) / "run";
  const std::string before = read(run / "step-000000000001" / checkpoint::kTensorsFile);
  checkpoint::Source failing = [](uint64_t, std::span<uint8_t>) -> Result<std::span<const uint8_t>> {
    return Status(Code::kConnectionReset, "the client is gone");
  };
  auto w = dir.value()->write(save(2), failing);
  EXPECT_EQ(w.status().code(), Code::kConnectionReset);
  EXPECT_NE(w.status().message().find("reading tensor 'w'"), std::string::npos);
  auto again = dir.value()->write(save(1), source());
  EXPECT_EQ(again.status().code(), Code::kBadState);
  EXPECT_EQ(steps(run), (std::vector<std::string>{".outboard-lock", "step-000000000001"}));
  EXPECT_EQ(read(run / "step-000000000001" / checkpoint::kTensorsFile), before);
}

TEST_F(CheckpointStoreTest, ACheckpointOverTheDirectorysLimitOrTheFreeSpaceIsRefusedBeforeWriting) {
  // Each checkpoint: 40 B of tensors and the state (28 B), files of a few hundred bytes.
  auto one = Directory::open(root_, "one", 0);
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(one.value()->write(save(1), source()).ok());
  const uint64_t checkpoint = fs::file_size(fs::path(root_) / "one/step-000000000001" / checkpoint::kTensorsFile) +
                              fs::file_size(fs::path(root_) / "one/step-000000000001" / checkpoint::kManifestFile);
  one.value().reset();

  // Room for two checkpoints and one byte short of the third's tensors and state.
  auto dir = Directory::open(root_, "run", 0, {.max_dir_bytes = 2 * checkpoint + 67});
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir.value()->write(save(1), source()).ok());
  ASSERT_TRUE(dir.value()->write(save(2), source()).ok());
  auto over = dir.value()->write(save(3), source());
  ASSERT_EQ(over.status().code(), Code::kTooBig) << over.status().to_string();
  const std::string why = over.status().message();
  EXPECT_NE(why.find("step-000000000003 takes at least 68 B"), std::string::npos) << why;
  EXPECT_NE(why.find("holds " + std::to_string(2 * checkpoint) + " B, over --checkpoint-max-dir-bytes"),
            std::string::npos)
      << why;
  EXPECT_EQ(steps(fs::path(root_) / "run"),
            (std::vector<std::string>{".outboard-lock", "step-000000000001", "step-000000000002"}));
  // A filesystem that must stay wholly free takes no checkpoint.
  auto full = Directory::open(root_, "full", 0, {.min_free_pct = 100});
  ASSERT_TRUE(full.ok());
  auto refused = full.value()->write(save(1), source());
  ASSERT_EQ(refused.status().code(), Code::kTooBig);
  EXPECT_NE(refused.status().message().find("B free, of which --checkpoint-min-free-pct keeps 100%"),
            std::string::npos)
      << refused.status().message();
  EXPECT_EQ(steps(fs::path(root_) / "full"), (std::vector<std::string>{".outboard-lock"}));
}

TEST_F(CheckpointStoreTest, AWriterFedInPiecesWritesWhatWriteDoesAndOneLeftUnfinishedLeavesNothing) {
  auto dir = Directory::open(root_, "run", 0);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir.value()->write(save(1), source()).ok());
  // Step 2 from the same bytes in pieces of 5 B, the second straddling "w" and "b".
  std::vector<uint8_t> bytes(staging_.begin() + 64, staging_.begin() + 88);
  bytes.insert(bytes.end(), staging_.begin() + 256, staging_.begin() + 272);
  auto w = dir.value()->begin(save(2));
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w.value()->total(), 40u);
  EXPECT_EQ(w.value()->finish().status().code(), Code::kBadState);  // nothing in yet
  for (size_t at = 0; at < bytes.size(); at += 5)
    ASSERT_TRUE(w.value()->append({bytes.data() + at, std::min<size_t>(5, bytes.size() - at)}).ok());
  EXPECT_EQ(w.value()->append({bytes.data(), 1}).code(), Code::kOutOfRange);
  ASSERT_TRUE(w.value()->finish().ok());
  w.value().reset();
  const fs::path run = fs::path(root_) / "run";
  const std::string one = read(run / "step-000000000001" / checkpoint::kTensorsFile);
  std::string two = read(run / "step-000000000002" / checkpoint::kTensorsFile);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(one.substr(one.size() - 40), two.substr(two.size() - 40));

  // Destroyed half-written (the client left): no step 3, no temporary directory.
  auto half = dir.value()->begin(save(3));
  ASSERT_TRUE(half.ok());
  ASSERT_TRUE(half.value()->append({bytes.data(), 30}).ok());
  ASSERT_TRUE(fs::exists(run / ".tmp-step-000000000003"));
  half.value().reset();
  EXPECT_EQ(steps(run), (std::vector<std::string>{".outboard-lock", "step-000000000001", "step-000000000002"}));
}

TEST_F(CheckpointStoreTest, ATenantsDirectoriesLieInItsOwnHomeUnderTheRoot) {
  const std::string home = checkpoint::tenant_dir("/O=outboard/CN=tenant1");
  ASSERT_EQ(home.rfind("tenants/O=outboard_CN=tenant1-", 0), 0u) << home;
  EXPECT_EQ(home.size(), std::string("tenants/O=outboard_CN=tenant1-").size() + 16);
  EXPECT_NE(checkpoint::tenant_dir("/O=a/CN=b"), checkpoint::tenant_dir("_O=a_CN=b"));  // spelled alike
  for (const char* identity : {"../..", "psk:../../etc", "/"}) {
    const fs::path p = checkpoint::tenant_dir(identity);
    EXPECT_EQ(std::distance(p.begin(), p.end()), 2) << p;  // "tenants" and one name, never a way out
    EXPECT_TRUE(p.filename() != ".." && p.filename() != ".") << p;
  }
  auto dir = Directory::open(root_, "run", 1, {}, home);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_EQ(dir.value()->path(), (fs::path(root_) / home / "run").string());
  auto again = Directory::open(root_, (fs::path(root_) / home / "run2").string(), 1, {}, home);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  for (const std::string& outside : {(fs::path(root_) / "run").string(), std::string("../x/run")}) {
    auto d = Directory::open(root_, outside, 1, {}, home);
    EXPECT_EQ(d.status().code(), Code::kInvalidArgument) << outside;
    EXPECT_NE(d.status().message().find("is not inside this client's own directory " + root_ + "/" + home),
              std::string::npos)
        << d.status().message();
  }
}

TEST_F(CheckpointStoreTest, AHomesLimitCountsTheCheckpointsOfAllItsDirectories) {
  const uint64_t checkpoint = checkpoint_size();
  // Room for three checkpoints in the home, whichever of its directories (nested too) hold them.
  const Limits limits{.max_home_bytes = 3 * checkpoint + 67};
  const std::string home = checkpoint::tenant_dir("tenant");
  auto a = Directory::open(root_, "a", 0, limits, home);
  auto b = Directory::open(root_, "b/deeper", 0, limits, home);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a.value()->write(save(1), source()).ok());
  ASSERT_TRUE(b.value()->write(save(1), source()).ok());
  ASSERT_TRUE(a.value()->write(save(2), source()).ok());
  auto over = b.value()->write(save(2), source());
  ASSERT_EQ(over.status().code(), Code::kTooBig) << over.status().to_string();
  EXPECT_NE(over.status().message().find("this client's directories under " + root_ + "/" + home + " hold " +
                                         std::to_string(3 * checkpoint) +
                                         " B (with the checkpoints being written), over --checkpoint-max-client-bytes"),
            std::string::npos)
      << over.status().message();
  // Another home's limit is its own.
  auto other = Directory::open(root_, "a", 0, limits, checkpoint::tenant_dir("other"));
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other.value()->write(save(1), source()).ok());
  // How deep a client may name a directory bounds the count's walk.
  std::string deep;
  for (size_t i = 0; i <= checkpoint::kMaxDirDepth; ++i) deep += "d/";
  auto too_deep = Directory::open(root_, deep, 0, limits, home);
  EXPECT_EQ(too_deep.status().code(), Code::kInvalidArgument);
  EXPECT_NE(too_deep.status().message().find("33 levels down, over kMaxDirDepth 32"), std::string::npos)
      << too_deep.status().message();
}

TEST_F(CheckpointStoreTest, AHomesLimitCountsTheCheckpointsBeingWrittenInItsOtherDirectories) {
  const uint64_t checkpoint = checkpoint_size();
  const uint64_t incoming = save(1).tensor_bytes() + save(1).state.size();  // what a writer reserves
  // Room for one checkpoint and one being written: a's, started and not finished, until it gives up.
  const Limits limits{.max_home_bytes = checkpoint + incoming};
  const std::string home = checkpoint::tenant_dir("tenant");
  auto a = Directory::open(root_, "a", 0, limits, home);
  auto b = Directory::open(root_, "b", 1, limits, home);
  ASSERT_TRUE(a.ok() && b.ok());
  auto writing = a.value()->begin(save(1));
  ASSERT_TRUE(writing.ok()) << writing.status().to_string();
  ASSERT_TRUE(b.value()->write(save(1), source()).ok());
  auto over = b.value()->write(save(2), source());
  ASSERT_EQ(over.status().code(), Code::kTooBig) << over.status().to_string();
  EXPECT_NE(over.status().message().find(" hold " + std::to_string(checkpoint + incoming) +
                                         " B (with the checkpoints being written)"),
            std::string::npos)
      << over.status().message();
  writing.value().reset();  // given up: its room is free again
  ASSERT_TRUE(b.value()->write(save(2), source()).ok());
  // A temporary directory no writer holds (one left by a dead agent) reserves nothing.
  const fs::path stale = fs::path(root_) / home / "c" / ".tmp-step-000000000001";
  fs::create_directories(stale);
  std::ofstream(stale / ".reserved").close();
  fs::resize_file(stale / ".reserved", 1ull << 30);
  ASSERT_TRUE(b.value()->write(save(3), source()).ok());
  // A finished checkpoint keeps no reservation.
  ASSERT_TRUE(a.value()->write(save(5), source()).ok());
  EXPECT_EQ(steps(fs::path(root_) / home / "a/step-000000000005"),
            (std::vector<std::string>{checkpoint::kManifestFile, checkpoint::kTensorsFile}));
}

TEST_F(CheckpointStoreTest, StepsAreListedAndTheirFilesReadInPiecesOnlyInsideTheDirectory) {
  auto dir = Directory::open(root_, "run", 0);
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(dir.value()->steps().empty());
  for (uint64_t step : {12, 3}) ASSERT_TRUE(dir.value()->write(save(step), source()).ok());
  EXPECT_EQ(dir.value()->steps(), (std::vector<uint64_t>{3, 12}));
  const fs::path run = fs::path(root_) / "run";
  const std::string whole = read(run / "step-000000000003" / checkpoint::kTensorsFile);
  // An answer: the file's size, then the bytes read.
  const auto size_and_bytes = [](const Buffer& answer) {
    uint64_t size = 0;
    std::memcpy(&size, answer.data(), 8);
    return std::make_pair(size, std::string(reinterpret_cast<const char*>(answer.data()) + 8, answer.size() - 8));
  };
  std::string pieces;
  for (uint64_t at = 0;;) {
    auto got = dir.value()->read(3, wire::File::kTensors, at, 7);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_GE(got->size(), 8u);
    const auto [size, bytes] = size_and_bytes(*got);
    EXPECT_EQ(size, whole.size());
    EXPECT_LE(bytes.size(), 7u);
    if (bytes.empty()) break;
    pieces += bytes;
    at += bytes.size();
  }
  EXPECT_EQ(pieces, whole);
  auto manifest = dir.value()->read(12, wire::File::kManifest, 0, 1 << 20);
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(size_and_bytes(*manifest).second, read(run / "step-000000000012" / checkpoint::kManifestFile));
  // A missing step, a missing file, and a file that is a link (to one outside) are not read.
  EXPECT_EQ(dir.value()->read(4, wire::File::kTensors, 0, 8).status().code(), Code::kNotFound);
  fs::remove(run / "step-000000000012" / checkpoint::kManifestFile);
  auto gone = dir.value()->read(12, wire::File::kManifest, 0, 8);
  EXPECT_EQ(gone.status().code(), Code::kNotFound);
  EXPECT_NE(gone.status().message().find("step-000000000012/manifest.json is missing"), std::string::npos);
  std::ofstream(fs::path(root_) / "secret") << "not a checkpoint";
  fs::create_symlink(fs::path(root_) / "secret", run / "step-000000000012" / checkpoint::kManifestFile);
  EXPECT_EQ(dir.value()->read(12, wire::File::kManifest, 0, 8).status().code(), Code::kNotFound);
}

TEST_F(CheckpointStoreTest, WhatACrashedWriterLeftIsRemovedAtOpen) {
  const fs::path stale = fs::path(root_) / "run" / ".tmp-step-000000000009";
  fs::create_directories(stale);
  std::ofstream(stale / checkpoint::kTensorsFile) << "half";
  ASSERT_TRUE(Directory::open(root_, "run", 1).ok());
  EXPECT_FALSE(fs::exists(stale));
}

TEST(CheckpointWireTest, SavesRoundTripAndEachLimitIsNamed) {
  wire::Save s;
  s.handle = 3;
  s.step = 42;
  s.region = {1, 2, 3};
  s.tensors = {{"a", wire::Dtype::kBF16, {4}, 0, 8}, {"b", wire::Dtype::kBool, {}, 64, 1}};
  s.state = "null";
  auto back = wire::decode_save(wire::encode(s));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->tensors[0].name, "a");
  EXPECT_EQ(back->tensors[1].dims.size(), 0u);
  EXPECT_EQ(wire::encode(back.value()), wire::encode(s));

  auto refused = [](wire::Save bad, const char* says) {
    auto r = wire::decode_save(wire::encode(bad));
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << says;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
  };
  wire::Save big_step = s;
  big_step.step = wire::kMaxStep + 1;
  refused(big_step, "exceeds 999999999999");
  wire::Save dims = s;
  dims.tensors[0].dims.assign(wire::kMaxDims + 1, 1);
  refused(dims, "dimensions exceed 16");
  wire::Save name = s;
  name.tensors[0].name.assign(wire::kMaxNameBytes + 1, 'x');
  refused(name, "tensor name of 1025 B exceeds 1024 B");
  wire::Save region = s;
  region.region.resize(wire::kMaxDescriptorBytes + 1);
  refused(region, "staging region descriptor of 4097 B exceeds 4096 B");

  auto open = wire::decode_open(wire::encode(wire::Open{wire::kMaxKeepLast + 1, "d"}));
  EXPECT_NE(open.status().message().find("keep_last 65537 exceeds 65536"), std::string::npos);
  EXPECT_EQ(wire::decode_close(wire::encode_close(7)).value(), 7u);
  EXPECT_EQ(wire::decode_close(wire::encode(wire::Open{})).status().code(), Code::kInvalidArgument);

  const std::vector<uint8_t> bytes(100, 7);
  const auto encoded = wire::encode(wire::Piece{3, 42, 1000, bytes});
  auto piece = wire::decode_piece(encoded);
  ASSERT_TRUE(piece.ok()) << piece.status().to_string();
  EXPECT_EQ(piece->handle, 3u);
  EXPECT_EQ(piece->step, 42u);
  EXPECT_EQ(piece->offset, 1000u);
  EXPECT_EQ(piece->bytes.size(), 100u);
  EXPECT_EQ(piece->bytes.data(), encoded.data() + encoded.size() - 100);  // a view, not a copy
  auto r = wire::decode_read(wire::encode(wire::Read{2, 9, wire::File::kManifest, 100, 4096}));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->step, 9u);
  EXPECT_EQ(r->file, wire::File::kManifest);
  EXPECT_EQ(r->length, 4096u);
  EXPECT_EQ(wire::decode_list(wire::encode_list(5)).value(), 5u);
  for (const auto& bad : {wire::Read{0, 1, wire::File::kTensors, 0, 0},
                          wire::Read{0, 1, wire::File::kTensors, 0, static_cast<uint32_t>(wire::kMaxPieceBytes + 1)},
                          wire::Read{0, wire::kMaxStep + 1, wire::File::kTensors, 0, 8}})
    EXPECT_EQ(wire::decode_read(wire::encode(bad)).status().code(), Code::kInvalidArgument);
  const std::vector<uint8_t> big(wire::kMaxPieceBytes + 1);
  for (const auto& bad : {wire::encode(wire::Piece{0, 1, 0, {}}), wire::encode(wire::Piece{0, 1, 0, big}),
                          wire::encode(wire::Piece{0, 1, UINT64_MAX, bytes})}) {
    auto r = wire::decode_piece(bad);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("a piece holds 1 to kMaxPieceBytes"), std::string::npos)
        << r.status().message();
  }
}

// The service in this process (isolation none), so the sanitizers see its worker and the
// progress thread: two saves from a client's staging region, one of them refused.
class CheckpointServiceTest : public testing::AgentFixture {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/outboard-ck-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    AgentConfig config = testing::test_config();
    config.isolation = Isolation::kNone;
    config.checkpoint_root = root_;
    start_agent(config);
  }
  void TearDown() override {
    stop_agent();
    fs::remove_all(root_);
  }
  std::string root_;
};

TEST_F(CheckpointServiceTest, PersistsFromTheClientsStagingRegion) {
  auto c = connect();
  ASSERT_TRUE(c);
  const auto deadline = [] { return Deadline::after_ms(10'000); };
  auto region = c->allocate_memory(1 << 20);
  ASSERT_TRUE(region.ok());
  for (size_t i = 0; i < region->size(); ++i) region->data()[i] = static_cast<uint8_t>(i * 7);
  auto opened = c->request("checkpoint", wire::encode(wire::Open{1, "run"}), deadline());
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  wire::Save s;
  s.region.assign(region->descriptor().begin(), region->descriptor().end());
  s.tensors = {{"big", wire::Dtype::kU8, {1 << 19}, 4096, 1 << 19}};
  s.state = "{}";
  for (uint64_t step : {1, 2}) {
    s.step = step;
    auto answer = c->request("checkpoint", wire::encode(s), deadline());
    ASSERT_TRUE(answer.ok()) << answer.status().to_string();
    auto j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(answer->data()), answer->size()));
    EXPECT_EQ(j["step"], step);
    EXPECT_EQ(j["pruned"], step == 2 ? 1 : 0);
  }
  s.tensors[0].offset = (1 << 20) - 8;
  auto outside = c->request("checkpoint", wire::encode(s), deadline());
  EXPECT_EQ(outside.status().code(), Code::kOutOfRange);
  const std::string bytes = read(fs::path(root_) / "run" / "step-000000000002" / checkpoint::kTensorsFile);
  ASSERT_GE(bytes.size(), size_t{1} << 19);
  EXPECT_EQ(0, std::memcmp(bytes.data() + bytes.size() - (1 << 19), region->data() + 4096, 1 << 19));
  EXPECT_FALSE(fs::exists(fs::path(root_) / "run" / "step-000000000001"));
}

TEST_F(CheckpointServiceTest, AnInBandSaveTakesItsBytesInPiecesInOrderAndAnythingElseEndsIt) {
  auto c = connect();
  ASSERT_TRUE(c);
  const auto deadline = [] { return Deadline::after_ms(10'000); };
  auto opened = c->request("checkpoint", wire::encode(wire::Open{0, "run"}), deadline());
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  std::vector<uint8_t> bytes(3 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 13 + 1);
  wire::Save s;  // no descriptor: in-band
  s.tensors = {{"a", wire::Dtype::kU8, {1 << 20}, 0, 1 << 20}, {"b", wire::Dtype::kU8, {2 << 20}, 0, 2 << 20}};
  s.state = "{}";
  const auto piece = [&](uint64_t step, uint64_t at, uint64_t n) {
    return wire::encode(wire::Piece{0, step, at, {bytes.data() + at, n}});
  };
  const auto text = [](const Result<Buffer>& b) {
    return std::string(reinterpret_cast<const char*>(b.value().data()), b.value().size());
  };

  // Each save's answer comes after its pieces: submitted, then awaited.
  Result<Buffer> saved = Status(Code::kTimedOut, "no answer");
  bool answered = false;
  const auto start = [&](uint64_t step) {
    s.step = step;
    answered = false;
    return c->submit("checkpoint", Buffer::copy_of(wire::encode(s)), deadline(), [&](Result<Buffer> r) {
      saved = std::move(r);
      answered = true;
    });
  };

  // Step 1 in pieces of 768 KiB (the last straddles "a" and "b"), the save answered after the last.
  ASSERT_TRUE(start(1).ok());
  for (uint64_t at = 0; at < bytes.size(); at += 768 << 10) {
    auto r = c->request("checkpoint", piece(1, at, std::min<uint64_t>(768 << 10, bytes.size() - at)), deadline());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
  ASSERT_TRUE(c->wait_until(deadline(), [&] { return answered; }));
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_EQ(nlohmann::json::parse(text(saved))["step"], 1);
  const std::string written = read(fs::path(root_) / "run" / "step-000000000001" / checkpoint::kTensorsFile);
  ASSERT_GE(written.size(), bytes.size());
  EXPECT_EQ(0, std::memcmp(written.data() + written.size() - bytes.size(), bytes.data(), bytes.size()));

  // A piece out of order ends step 2: its save fails naming where, and nothing of it stays.
  ASSERT_TRUE(start(2).ok());
  ASSERT_TRUE(c->request("checkpoint", piece(2, 0, 1000), deadline()).ok());
  auto skipped = c->request("checkpoint", piece(2, 2000, 1000), deadline());
  EXPECT_EQ(skipped.status().code(), Code::kOutOfRange);
  ASSERT_TRUE(c->wait_until(deadline(), [&] { return answered; }));
  EXPECT_EQ(saved.status().code(), Code::kOutOfRange);
  EXPECT_NE(saved.status().message().find("a piece of 1000 B at 2000 of step 2, whose next byte is 1000 of 3145728"),
            std::string::npos)
      << saved.status().message();
  EXPECT_EQ(c->request("checkpoint", piece(2, 1000, 1000), deadline()).status().code(), Code::kNotFound);

  // A region save while one receives pieces is refused; a close gives the unfinished one up.
  ASSERT_TRUE(start(3).ok());
  ASSERT_TRUE(c->request("checkpoint", piece(3, 0, 1000), deadline()).ok());
  wire::Save other = s;
  other.step = 4;
  other.region = {1, 2, 3};
  auto busy = c->request("checkpoint", wire::encode(other), deadline());
  EXPECT_EQ(busy.status().code(), Code::kBadState);
  EXPECT_NE(busy.status().message().find("still receiving the pieces of step 3"), std::string::npos);
  ASSERT_TRUE(c->request("checkpoint", wire::encode_close(0), deadline()).ok());
  ASSERT_TRUE(c->wait_until(deadline(), [&] { return answered; }));
  EXPECT_NE(saved.status().message().find("closed before the last piece came"), std::string::npos);
  // The worker drops the half-written step after the close: the directory opens again clean.
  const fs::path half = fs::path(root_) / "run/.tmp-step-000000000003";
  for (int i = 0; i < 10'000 && fs::exists(half); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(fs::exists(half));
  auto again = c->request("checkpoint", wire::encode(wire::Open{0, "run"}), deadline());
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(root_) / "run")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".outboard-lock", "step-000000000001"}));
}

}  // namespace
}  // namespace outboard::services
