// Client of the agent's `detokenize` service: a server generating text sends
// each sequence's new ids and gets back the text they complete. Each
// sequence's decode state (the bytes of a character begun and not yet ended,
// the leading-space rule) lives on the agent; one round trip steps every
// sequence of a generation step. The host equivalent is DecodeStream: the
// same text, step for step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "outboard/channel.h"

namespace outboard {

/// One sequence's new ids in a RemoteDetokenizer::step.
struct StreamStep {
  uint32_t stream = 0;
  std::span<const int32_t> ids;
  /// Also the bytes held back (U+FFFD for a broken character); the stream is closed.
  bool finish = false;
};

/// The answer to one step: step i's text, or why it failed (it then has no
/// text, and its stream is as it was).
class SteppedText {
 public:
  SteppedText() = default;
  SteppedText(std::string text, std::vector<uint64_t> offsets, std::vector<Status> errors)
      : text_(std::move(text)), offsets_(std::move(offsets)), errors_(std::move(errors)) {}
  [[nodiscard]] size_t size() const { return errors_.size(); }
  [[nodiscard]] std::string_view text(size_t i) const {
    return std::string_view(text_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
  }
  [[nodiscard]] const Status& error(size_t i) const { return errors_[i]; }
  /// Every step's text back to back (valid UTF-8); step i's is [offsets()[i], offsets()[i+1]).
  [[nodiscard]] const std::string& all_text() const { return text_; }
  [[nodiscard]] const std::vector<uint64_t>& offsets() const { return offsets_; }

 private:
  std::string text_;
  std::vector<uint64_t> offsets_;
  std::vector<Status> errors_;
};

/// A vocabulary opened on the agent's detokenize service. Streams belong to
/// it: another client, or another RemoteDetokenizer, cannot step or close
/// them. Thread mode: single (calls block for a round trip, but submit()).
/// The connection must outlive it.
class RemoteDetokenizer {
 public:
  /// Opens `name` as RemoteTokenizer::open does: a name the agent resolves
  /// in its vocabulary directory, or a file of this machine (a name holding
  /// a '/'), uploaded.
  [[nodiscard]] static Result<std::unique_ptr<RemoteDetokenizer>> open(Connection& connection, const std::string& name,
                                                                       Deadline deadline);
  /// A new sequence's stream, closed by a finishing step (even one whose ids
  /// fail) or close_stream(). No round trip: the first step sent for it
  /// begins it on the agent. Names are this detokenizer's, none of them open
  /// twice.
  [[nodiscard]] uint32_t open_stream();
  /// Closes a stream without what it holds (an abandoned sequence); one
  /// never stepped is closed here.
  [[nodiscard]] Status close_stream(uint32_t stream, Deadline deadline);
  /// Steps every stream named. A step that fails (an unknown id or stream)
  /// fails alone; the call fails only when the request does (connection,
  /// deadline, the service's limits).
  [[nodiscard]] Result<SteppedText> step(std::span<const StreamStep> steps, Deadline deadline);
  /// As step(), without waiting for the answer: `done` runs once with it
  /// (from progress() or a blocking call of the connection, under its lock:
  /// it must only hand the answer on). Steps submitted one after another run
  /// in that order, so a server can post a generation step's ids and take
  /// their text after its next step. Waits only for a send credit.
  [[nodiscard]] Status submit(std::span<const StreamStep> steps, Deadline deadline,
                              std::function<void(Result<SteppedText>)> done);
  [[nodiscard]] size_t vocab_size() const { return vocab_size_; }

 private:
  RemoteDetokenizer(Connection& connection, uint32_t handle, size_t vocab_size)
      : connection_(connection), handle_(handle), vocab_size_(vocab_size) {}
  /// The request for `steps`: each of a stream opened here is flagged to
  /// begin it where the agent has not (so no answer needs to say it did).
  std::vector<uint8_t> step_request(std::span<const StreamStep> steps);

  Connection& connection_;
  uint32_t handle_;
  size_t vocab_size_;
  uint32_t last_stream_ = 0;
  std::unordered_map<uint32_t, bool> open_;  // the streams opened here and not ended: whether a step was sent
  friend struct RemoteDetokenizerNames;      // a test's: names near their wrap
};

}  // namespace outboard
