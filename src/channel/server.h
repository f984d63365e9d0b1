// Agent side of the channel: listens, completes handshakes, routes service
// frames to one handler. Thread mode: multi (hub mutex).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "channel/connection_impl.h"

namespace outboard::channel {

class Server {
 public:
  /// `inline_services[i]`: service i's frames may be handed to `on_service`
  /// inside UCX's receive callback (Service::handles_inline()).
  static Result<std::unique_ptr<Server>> listen(const std::string& address, const ChannelConfig& config,
                                                std::vector<std::string> services, std::vector<bool> inline_services,
                                                Connection::Impl::ServiceFn on_service,
                                                std::function<void(uint32_t)> on_closed);
  ~Server();

  [[nodiscard]] const std::string& address() const { return listener_.address(); }
  [[nodiscard]] Hub& hub() { return *hub_; }
  [[nodiscard]] size_t connections();
  [[nodiscard]] const Counters& counters() const { return counters_; }
  /// Fails every open request with `why`, sends kClose, and flushes (bounded by deadline).
  void shut_down(const Status& why, Deadline deadline);

 private:
  Server() = default;
  void on_hello(const FrameHeader& h, transport::IncomingAm& am);
  void accept(ucp_ep* reply_ep, std::span<const uint8_t> hello);
  void prune();

  std::shared_ptr<Hub> hub_;
  ChannelConfig config_;
  std::vector<std::string> services_;
  std::vector<bool> inline_services_;
  Connection::Impl::ServiceFn on_service_;
  std::function<void(uint32_t)> on_closed_;
  transport::Listener listener_;
  std::unordered_map<ucp_ep*, transport::Endpoint> pending_boot_;
  std::vector<std::shared_ptr<Connection::Impl>> conns_;
  Counters counters_;
};

}  // namespace outboard::channel
