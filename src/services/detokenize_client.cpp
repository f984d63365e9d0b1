#include "outboard/detokenize_client.h"

#include "services/detokenize_wire.h"

namespace outboard {

namespace wire = detokenize_wire;

namespace {
constexpr std::string_view kService = "detokenize";

Status short_answer(std::string_view what, size_t bytes) {
  return {Code::kIoError, "detokenize service answered " + std::string(what) + " with " + std::to_string(bytes) + " B"};
}

// The agent's answer to `n` steps, checked like any peer's bytes: lengths must add up.
Result<SteppedText> step_answer(const Buffer& reply, size_t n) {
  wire::Reader r{reply.span()};
  std::vector<wire::StepResult> results(n);
  std::vector<uint64_t> offsets(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    if (!r.get(results[i])) return short_answer("a step", reply.size());
    offsets[i + 1] = offsets[i] + results[i].length;
  }
  std::span<const uint8_t> text;
  if (!r.take(offsets.back(), text)) return short_answer("a step", reply.size());
  std::vector<Status> errors(n);
  for (size_t i = 0; i < n; ++i) {
    if (results[i].code == 0) continue;
    std::string message;
    if (!r.get_string(message)) return short_answer("a step", reply.size());
    errors[i] = Status(known_code(results[i].code) ? static_cast<Code>(results[i].code) : Code::kIoError, message);
  }
  return SteppedText(std::string(reinterpret_cast<const char*>(text.data()), text.size()), std::move(offsets),
                     std::move(errors));
}
}  // namespace

Result<std::unique_ptr<RemoteDetokenizer>> RemoteDetokenizer::open(Connection& connection, const std::string& name,
                                                                   Deadline deadline) {
  wire::Writer w;
  OB_RETURN_IF_ERROR(services::put_vocabulary_request(w, name));
  OB_ASSIGN_OR_RETURN(Buffer reply, connection.request(kService, w.bytes, deadline));
  uint32_t handle = 0, vocab = 0;
  wire::Reader r{reply.span()};
  if (!r.get(handle) || !r.get(vocab)) return short_answer("an open", reply.size());
  return std::unique_ptr<RemoteDetokenizer>(new RemoteDetokenizer(connection, handle, vocab));
}

uint32_t RemoteDetokenizer::open_stream() {
  // Past 2^32 names wrap: skip those still open (a long sequence outlives billions of short ones).
  do ++last_stream_;
  while (open_.count(last_stream_));
  open_[last_stream_] = false;
  return last_stream_;
}

Status RemoteDetokenizer::close_stream(uint32_t stream, Deadline deadline) {
  if (auto it = open_.find(stream); it != open_.end()) {
    const bool stepped = it->second;
    open_.erase(it);
    if (!stepped) return {};  // never begun on the agent
  }
  wire::Writer w;
  w.put(wire::kClose);
  w.put(handle_);
  w.put(stream);
  return connection_.request(kService, w.bytes, deadline).status();
}

std::vector<uint8_t> RemoteDetokenizer::step_request(std::span<const StreamStep> steps) {
  wire::Writer w;
  w.put(wire::kStep);
  w.put(handle_);
  w.put(static_cast<uint32_t>(steps.size()));
  size_t ids = 0;
  for (const StreamStep& s : steps) {
    auto it = open_.find(s.stream);
    const bool begin = it != open_.end();
    if (begin && s.finish) open_.erase(it);
    else if (begin) it->second = true;
    w.put(wire::Step{.stream = s.stream,
                     .ids = static_cast<uint32_t>(s.ids.size()),
                     .flags = static_cast<uint8_t>((s.finish ? wire::kFinish : 0) | (begin ? wire::kBegin : 0))});
    ids += s.ids.size();
  }
  w.bytes.reserve(w.bytes.size() + ids * sizeof(int32_t));
  for (const StreamStep& s : steps) w.put_bytes({reinterpret_cast<const uint8_t*>(s.ids.data()), s.ids.size_bytes()});
  return std::move(w.bytes);
}

Result<SteppedText> RemoteDetokenizer::step(std::span<const StreamStep> steps, Deadline deadline) {
  OB_ASSIGN_OR_RETURN(Buffer reply, connection_.request(kService, step_request(steps), deadline));
  return step_answer(reply, steps.size());
}

Status RemoteDetokenizer::submit(std::span<const StreamStep> steps, Deadline deadline,
                                 std::function<void(Result<SteppedText>)> done) {
  return connection_.submit(
      kService, Buffer::copy_of(step_request(steps)), deadline,
      [n = steps.size(), done = std::move(done)](Result<Buffer> reply) {
        done(reply.ok() ? step_answer(*reply, n) : Result<SteppedText>(reply.status()));
      },
      Connection::Credit::kWait);
}

}  // namespace outboard
