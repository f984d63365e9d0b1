// The tokenize service and its client against a real agent over real UCX,
// with a small WordPiece vocabulary written by the test.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "../agent_fixture.h"
#include "../temp_file.h"
#include "outboard/tokenize_client.h"

namespace outboard {
namespace {

constexpr std::string_view kVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n##s\nthe\ncat\n##ty\n,\n.\n";

// Param: the agent's tokenize workers; 0 tokenizes on its progress thread.
class TokenizeServiceTest : public testing::AgentFixture, public ::testing::WithParamInterface<uint32_t> {
 protected:
  void SetUp() override {
    AgentConfig config = testing::test_config();
    config.tokenize_threads = GetParam();
    config.max_text_bytes = 64;
    start_agent(config);
    conn_ = connect();
    ASSERT_TRUE(conn_);
    auto local = Tokenizer::bert_wordpiece(vocab_.string());
    ASSERT_TRUE(local.ok()) << local.status().to_string();
    local_ = std::make_unique<Tokenizer>(std::move(local).value());
    auto remote = RemoteTokenizer::open(*conn_, vocab_.string(), Deadline::after_ms(5000), /*pool_ids=*/64);
    ASSERT_TRUE(remote.ok()) << remote.status().to_string();
    remote_ = std::move(remote).value();
  }
  void TearDown() override {
    remote_.reset();
    conn_.reset();
    stop_agent();
  }
  std::vector<int32_t> local_ids(std::string_view text) {
    std::vector<int32_t> ids;
    EXPECT_TRUE(local_->encode(text, ids).ok());
    return ids;
  }
  static std::vector<int32_t> text_ids(const EncodedBatch& b, size_t i) {
    auto ids = b.ids().subspan(b.offsets()[i], b.offsets()[i + 1] - b.offsets()[i]);
    return {ids.begin(), ids.end()};
  }

  std::unique_ptr<Connection> conn_;
  testing::TempFile vocab_{"tokenize_service_vocab.txt", kVocab};
  std::unique_ptr<Tokenizer> local_;
  std::unique_ptr<RemoteTokenizer> remote_;
};

TEST_P(TokenizeServiceTest, IdsEqualTheLocalTokenizerForEveryText) {
  std::vector<std::string_view> texts = {"Hello worlds, the catty cat.", "", "zebra hello", "THE WORLD"};
  auto batch = remote_->encode_batch(texts, {}, Deadline::after_ms(5000));
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  ASSERT_EQ(batch.value().offsets().size(), texts.size() + 1);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_TRUE(batch.value().errors()[i].ok()) << batch.value().errors()[i].to_string();
    EXPECT_EQ(text_ids(batch.value(), i), local_ids(texts[i])) << "text " << i;
  }
  EXPECT_EQ(remote_->vocab_size(), 12u);
  EXPECT_GT(batch.value().timing().tokenize_ns, 0u);
}

TEST_P(TokenizeServiceTest, AFailingTextFailsAloneAndNamesWhy) {
  const std::string invalid = "hello \xff world";
  const std::string too_long(65, 'a');
  std::vector<std::string_view> texts = {"hello", invalid, "the cat", too_long, "hello hello hello", "world"};
  OffloadOptions options;
  options.max_len = 2;
  auto batch = remote_->encode_batch(texts, options, Deadline::after_ms(5000));
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  const auto& errors = batch.value().errors();
  EXPECT_TRUE(errors[0].ok());
  EXPECT_EQ(errors[1].code(), Code::kInvalidArgument);
  EXPECT_NE(errors[1].message().find("text 1"), std::string::npos) << errors[1].message();
  EXPECT_TRUE(errors[2].ok());
  EXPECT_EQ(errors[3].code(), Code::kTooBig);
  EXPECT_NE(errors[3].message().find("65 B exceeds max_text_bytes 64"), std::string::npos) << errors[3].message();
  EXPECT_EQ(errors[4].code(), Code::kTooBig);
  EXPECT_NE(errors[4].message().find("3 ids, over max_len 2"), std::string::npos) << errors[4].message();
  EXPECT_TRUE(errors[5].ok());
  for (size_t i : {0, 2, 5}) EXPECT_EQ(text_ids(batch.value(), i), local_ids(texts[i])) << "text " << i;
  for (size_t i : {1, 3, 4}) EXPECT_TRUE(text_ids(batch.value(), i).empty()) << "text " << i;
}

TEST_P(TokenizeServiceTest, TooSmallABufferFailsTheTextsThatDoNotFit) {
  std::vector<std::string_view> texts = {"hello world", "the cat the cat", "hello"};
  OffloadOptions options;
  options.capacity = 3;
  auto batch = remote_->encode_batch(texts, options, Deadline::after_ms(5000));
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  const auto& errors = batch.value().errors();
  EXPECT_TRUE(errors[0].ok());
  EXPECT_EQ(errors[1].code(), Code::kTooBig);
  EXPECT_NE(errors[1].message().find("output buffer too small: text 1 needs 4 ids at id 2 but the buffer holds 3 ids"),
            std::string::npos)
      << errors[1].message();
  EXPECT_TRUE(errors[2].ok());  // still fits after the failed one
  EXPECT_EQ(text_ids(batch.value(), 2), local_ids("hello"));
}

TEST_P(TokenizeServiceTest, BatchesFromSeveralThreadsGetTheirOwnIds) {
  // More ids in flight than the first slab holds: the pool grows, and slots
  // come back when batches are dropped.
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::string text;
        for (int w = 0; w < (t + i) % 7 + 1; ++w) text += (w + t) % 2 ? "hello " : "cat ";
        std::vector<std::string_view> texts = {text, "the world"};
        auto b = remote_->encode_batch(texts, {}, Deadline::after_ms(5000));
        if (!b.ok()) {
          ADD_FAILURE() << b.status().to_string();
          ++wrong;
        } else if (text_ids(b.value(), 0) != local_ids(text) || text_ids(b.value(), 1) != local_ids("the world")) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(TokenizeServiceTest, SubmittedBatchesCompleteWhileTheCallerProgresses) {
  const std::vector<std::string> texts = {"hello world", "the catty cat", "worlds", "", "hello \xff", "cat cat"};
  std::vector<std::optional<Result<EncodedBatch>>> results(texts.size());
  size_t done = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string_view one[] = {texts[i]};
    ASSERT_TRUE(remote_
                    ->submit(one, {}, Deadline::after_ms(5000),
                             [&, i](Result<EncodedBatch> r) {
                               results[i] = std::move(r);
                               ++done;
                             })
                    .ok());
  }
  ASSERT_TRUE(conn_->wait_until(Deadline::after_ms(5000), [&] { return done == texts.size(); }));
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_TRUE(results[i]->ok()) << i << ": " << results[i]->status().to_string();
    const EncodedBatch& b = results[i]->value();
    if (i == 4) {
      EXPECT_EQ(b.errors()[0].code(), Code::kInvalidArgument);
    } else {
      EXPECT_TRUE(b.errors()[0].ok()) << b.errors()[0].to_string();
      EXPECT_EQ(text_ids(b, 0), local_ids(texts[i])) << i;
    }
  }
  // A batch in flight when the agent goes still completes, or fails: never hangs.
  std::optional<Result<EncodedBatch>> late;
  const std::string_view one[] = {"hello"};
  ASSERT_TRUE(remote_->submit(one, {}, Deadline::after_ms(5000), [&](Result<EncodedBatch> r) { late = std::move(r); }).ok());
  stop_agent();
  ASSERT_TRUE(conn_->wait_until(Deadline::after_ms(5000), [&] { return late.has_value(); }));
  if (!late->ok()) {
    EXPECT_NE(late->status().code(), Code::kTimedOut) << late->status().to_string();
  }
}

TEST_P(TokenizeServiceTest, ASlabAddedForAPeakIsUnboundOnceEmpty) {
  const uint64_t first = remote_->registered_bytes();
  EXPECT_EQ(first, 64 * sizeof(int32_t));
  std::string long_text;
  while (long_text.size() + 6 <= 60) long_text += "hello ";
  const std::vector<std::string_view> peak = {long_text, long_text, long_text};  // reserves 3 x 60 ids
  const std::vector<std::string_view> small = {"the cat"};
  for (int round = 0; round < 2; ++round) {
    {
      auto big = remote_->encode_batch(peak, {}, Deadline::after_ms(5000));
      ASSERT_TRUE(big.ok()) << big.status().to_string();
      EXPECT_GT(remote_->registered_bytes(), first);
      auto other = remote_->encode_batch(small, {}, Deadline::after_ms(5000));
      ASSERT_TRUE(other.ok()) << other.status().to_string();
      EXPECT_EQ(text_ids(other.value(), 0), local_ids("the cat"));
      for (size_t i = 0; i < peak.size(); ++i) EXPECT_EQ(text_ids(big.value(), i), local_ids(long_text)) << i;
    }
    // The peak's slab is empty now; the next batch unbinds it.
    auto after = remote_->encode_batch(small, {}, Deadline::after_ms(5000));
    ASSERT_TRUE(after.ok()) << after.status().to_string();
    EXPECT_EQ(text_ids(after.value(), 0), local_ids("the cat"));
    EXPECT_EQ(remote_->registered_bytes(), first) << "round " << round;
  }
  // The agent forgot it (requests on a connection are handled in order).
  const uint8_t unbind[] = {'U', 1, 0, 0, 0};
  auto again = conn_->request("tokenize", unbind, Deadline::after_ms(2000));
  EXPECT_EQ(again.status().code(), Code::kNotFound) << again.status().to_string();
  EXPECT_NE(again.status().message().find("output buffer 1 is not bound"), std::string::npos);
  auto truncated = conn_->request("tokenize", bytes("U"), Deadline::after_ms(2000));
  EXPECT_EQ(truncated.status().code(), Code::kInvalidArgument) << truncated.status().to_string();
}

TEST_P(TokenizeServiceTest, AnUnbindThatFindsTheAgentsWindowFullIsSentWithALaterBatch) {
  remote_.reset();
  conn_.reset();
  stop_agent();
  AgentConfig config = testing::test_config();
  config.tokenize_threads = GetParam();
  config.max_text_bytes = 64;
  config.channel.recv_window_msgs = 2;
  auto holder = std::make_unique<testing::Holder>();
  testing::Holder* held = holder.get();
  start_agent(config, std::move(holder));
  conn_ = connect();
  ASSERT_TRUE(conn_);
  auto remote = RemoteTokenizer::open(*conn_, vocab_.string(), Deadline::after_ms(5000), /*pool_ids=*/64);
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  remote_ = std::move(remote).value();
  const uint64_t first = remote_->registered_bytes();
  std::string long_text;
  while (long_text.size() + 6 <= 60) long_text += "hello ";
  const std::vector<std::string_view> peak = {long_text, long_text, long_text};
  ASSERT_TRUE(remote_->encode_batch(peak, {}, Deadline::after_ms(5000)).ok());  // a slab added, now empty
  // Two held requests fill the agent's window: the next batch finds no credit, for its unbind either.
  int answered = 0;
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(conn_->submit("holder", Buffer(), Deadline::after_ms(5000), [&](Result<Buffer> r) {
                     EXPECT_TRUE(r.ok()) << r.status().to_string();
                     ++answered;
                   }).ok());
  ASSERT_TRUE(conn_->wait_until(Deadline::after_ms(5000), [&] { return held->held() == 2; }));
  const std::vector<std::string_view> small = {"the cat"};
  auto refused = remote_->submit(small, {}, Deadline::after_ms(5000), [](Result<EncodedBatch>) { ADD_FAILURE(); },
                                 Connection::Credit::kFail);
  EXPECT_EQ(refused.code(), Code::kAgain) << refused.to_string();
  EXPECT_GT(remote_->registered_bytes(), first) << "the slab is kept until the agent is told";
  held->answer_all(bytes("done"));
  ASSERT_TRUE(conn_->wait_until(Deadline::after_ms(5000), [&] { return answered == 2; }));
  auto after = remote_->encode_batch(small, {}, Deadline::after_ms(5000));
  ASSERT_TRUE(after.ok()) << after.status().to_string();
  EXPECT_EQ(text_ids(after.value(), 0), local_ids("the cat"));
  EXPECT_EQ(remote_->registered_bytes(), first);
  const uint8_t unbind[] = {'U', 1, 0, 0, 0};  // the agent forgot the slab
  EXPECT_EQ(conn_->request("tokenize", unbind, Deadline::after_ms(2000)).status().code(), Code::kNotFound);
}

TEST_P(TokenizeServiceTest, IdsLandInTheCallersMemoryWhichIsHeldWhileABatchViewsIt) {
  auto memory = std::make_shared<std::vector<int32_t>>(32, -1);
  std::weak_ptr<std::vector<int32_t>> alive = memory;
  auto opened = RemoteTokenizer::open(*conn_, vocab_.string(), Deadline::after_ms(5000), OutputMemory{*memory, memory});
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  auto remote = std::move(opened).value();
  EXPECT_EQ(remote->registered_bytes(), 32 * sizeof(int32_t));
  const int32_t* begin = memory->data();
  memory.reset();

  std::vector<std::string_view> texts = {"hello worlds", "the catty cat."};
  auto batch = remote->encode_batch(texts, {}, Deadline::after_ms(5000));
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  const EncodedBatch& b = batch.value();
  EXPECT_TRUE(b.ids().data() >= begin && b.ids().data() + b.ids().size() <= begin + 32) << "ids are not in our memory";
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(text_ids(b, i), local_ids(texts[i])) << i;

  std::string long_text;  // 48 ids: more than the caller's memory holds, so a slab of the tokenizer's
  while (long_text.size() + 6 <= 48) long_text += "hello ";
  std::vector<std::string_view> peak = {long_text};
  auto big = remote->encode_batch(peak, {}, Deadline::after_ms(5000));
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  EXPECT_TRUE(big.value().ids().data() < begin || big.value().ids().data() >= begin + 32);
  EXPECT_EQ(text_ids(big.value(), 0), local_ids(long_text));

  remote.reset();
  big = Status();
  EXPECT_FALSE(alive.expired()) << "a batch still views the memory";
  EXPECT_EQ(text_ids(b, 1), local_ids("the catty cat."));
  batch = Status();
  EXPECT_TRUE(alive.expired());

  std::span<int32_t> none;
  auto empty = RemoteTokenizer::open(*conn_, vocab_.string(), Deadline::after_ms(5000), OutputMemory{none, nullptr});
  EXPECT_EQ(empty.status().code(), Code::kInvalidArgument);
}

TEST_P(TokenizeServiceTest, BadRequestsGetErrorsAndTheConnectionStaysUsable) {
  auto r = conn_->request("tokenize", bytes("E"), Deadline::after_ms(2000));
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos);
  r = conn_->request("tokenize", bytes("Q"), Deadline::after_ms(2000));
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  auto missing = RemoteTokenizer::open(*conn_, "/nonexistent/vocab.txt", Deadline::after_ms(5000));
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  auto unknown = RemoteTokenizer::open(*conn_, "gpt5", Deadline::after_ms(5000));
  EXPECT_EQ(unknown.status().code(), Code::kNotFound);
  EXPECT_NE(unknown.status().message().find("'gpt5'"), std::string::npos);
  std::vector<std::string_view> texts = {"hello"};
  auto ok = remote_->encode_batch(texts, {}, Deadline::after_ms(5000));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(text_ids(ok.value(), 0), local_ids("hello"));
}

// Names resolve in the agent's vocabulary directory only; what a client's
// process has, it uploads.
class TokenizeVocabularyTest : public testing::AgentFixture {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "mine.txt") << kVocab;
    std::filesystem::create_symlink(outside_.string(), dir_ / "escape.txt");
    AgentConfig config = testing::test_config();
    config.vocab_dir = dir_.string();
    config.max_vocab_bytes = 4096;
    start_agent(config);
    conn_ = connect();
    ASSERT_TRUE(conn_);
  }
  void TearDown() override {
    conn_.reset();
    stop_agent();
    std::filesystem::remove_all(dir_);
  }
  Result<Buffer> open_raw(std::string_view name) {
    std::string body = "O" + std::string(name);
    return conn_->request("tokenize", bytes(body), Deadline::after_ms(5000));
  }

  std::filesystem::path dir_ = std::filesystem::temp_directory_path() / ("outboard_vocab_" + std::to_string(getpid()));
  testing::TempFile outside_{"outside_vocab.txt", kVocab};
  std::unique_ptr<Connection> conn_;
};

TEST_F(TokenizeVocabularyTest, ANameOpensOnlyAFileOfTheVocabularyDirectory) {
  auto mine = RemoteTokenizer::open(*conn_, "mine.txt", Deadline::after_ms(5000), /*pool_ids=*/64);
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  EXPECT_EQ(mine.value()->vocab_size(), 12u);
  // Existing or not, outside the directory or through a link out of it: one
  // answer, which says nothing of what is on disk.
  for (std::string name : {outside_.string(), std::string("../") + std::filesystem::path(outside_.string()).filename().string(),
                           std::string("escape.txt"), std::string("nothere.txt"), std::string("/etc/hostname")}) {
    auto r = open_raw(name);
    ASSERT_EQ(r.status().code(), Code::kNotFound) << name;
    EXPECT_EQ(r.status().message().find("is not in the agent's vocabulary directory"),
              r.status().message().find('\'') + 3 + name.size()) << r.status().message();
  }
}

TEST_F(TokenizeVocabularyTest, AClientsOwnVocabularyIsUploadedCheckedAndCappedInSize) {
  // A path of this process's: its bytes go to the agent, parsed by the same loaders.
  auto uploaded = RemoteTokenizer::open(*conn_, outside_.string(), Deadline::after_ms(5000), /*pool_ids=*/64);
  ASSERT_TRUE(uploaded.ok()) << uploaded.status().to_string();
  std::vector<std::string_view> texts = {"hello cats"};
  auto batch = uploaded.value()->encode_batch(texts, {}, Deadline::after_ms(5000));
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  EXPECT_EQ(batch->ids().size(), 3u);  // hello cat ##s

  testing::TempFile big{"big_vocab.txt", std::string(5000, 'a')};
  auto too_big = RemoteTokenizer::open(*conn_, big.string(), Deadline::after_ms(5000));
  EXPECT_EQ(too_big.status().code(), Code::kTooBig);
  EXPECT_NE(too_big.status().message().find("exceeds max_vocab_bytes 4096 (agent option --max-vocab-bytes)"),
            std::string::npos) << too_big.status().message();

  testing::TempFile broken{"broken.json", "{\"model\": "};
  auto bad = RemoteTokenizer::open(*conn_, broken.string(), Deadline::after_ms(5000));
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("uploaded vocabulary sha256:"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("not valid JSON"), std::string::npos) << bad.status().message();
  EXPECT_EQ(conn_->request("tokenize", bytes("L\x07" "abc"), Deadline::after_ms(5000)).status().code(),
            Code::kInvalidArgument);  // format 7
}

INSTANTIATE_TEST_SUITE_P(Workers, TokenizeServiceTest, ::testing::Values(0u, 2u),
                         [](const ::testing::TestParamInfo<uint32_t>& info) {
                           return info.param == 0 ? std::string("ProgressThread") : std::to_string(info.param) + "Workers";
                         });

}  // namespace
}  // namespace outboard
