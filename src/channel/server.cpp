#include "channel/server.h"

#include "outboard/log.h"

OB_LOG_MODULE("server");

namespace outboard::channel {

Result<std::unique_ptr<Server>> Server::listen(const std::string& address, const ChannelConfig& config,
                                               std::vector<std::string> services,
                                               std::vector<bool> inline_services,
                                               Connection::Impl::ServiceFn on_service,
                                               std::function<void(uint32_t)> on_closed) {
  OB_ASSIGN_OR_RETURN(auto host_port, transport::parse_host_port(address));
  OB_ASSIGN_OR_RETURN(auto hub, Hub::get(config));
  std::unique_ptr<Server> s(new Server());
  s->hub_ = std::move(hub);
  s->config_ = config;
  s->services_ = std::move(services);
  s->inline_services_ = std::move(inline_services);
  s->on_service_ = std::move(on_service);
  s->on_closed_ = std::move(on_closed);
  Lock lock(s->hub_->mutex());
  Server* self = s.get();
  OB_ASSIGN_OR_RETURN(s->listener_,
                      s->hub_->control().listen(host_port.first, host_port.second, [self](transport::Endpoint ep) {
                        ucp_ep* raw = ep.raw();
                        ep.on_failure([self, raw](Status) {
                          self->hub_->defer([self, raw] { self->pending_boot_.erase(raw); });
                        });
                        self->pending_boot_.emplace(raw, std::move(ep));
                      }));
  s->hub_->set_hello_handler([self](const FrameHeader& h, transport::IncomingAm& am) { self->on_hello(h, am); });
  OB_LOG_INFO("listening on %s", s->listener_.address().c_str());
  return s;
}

Server::~Server() {
  Lock lock(hub_->mutex());
  hub_->set_hello_handler(nullptr);
  for (auto& c : conns_) c->fail(Status(Code::kShutDown, "agent stopped"));
  conns_.clear();
  pending_boot_.clear();
}

void Server::on_hello(const FrameHeader&, transport::IncomingAm& am) {
  if (am.rendezvous) {
    ++counters_.errors;
    OB_LOG_WARN("oversized hello (%zu B) dropped", am.length);
    return;
  }
  auto hello = std::make_shared<std::vector<uint8_t>>(am.data, am.data + am.length);
  hub_->defer([this, hello, reply_ep = am.reply_ep] { accept(reply_ep, *hello); });
}

void Server::accept(ucp_ep* reply_ep, std::span<const uint8_t> hello) {
  auto boot = pending_boot_.find(reply_ep);
  if (boot == pending_boot_.end()) {
    ++counters_.errors;
    OB_LOG_WARN("hello from an unknown endpoint dropped");
    return;
  }
  Reader r(hello);
  uint32_t peer_id = 0, window_msgs = 0;
  uint64_t max_msg = 0, window_bytes = 0;
  std::vector<uint8_t> address;
  if (!r.u32(peer_id) || !r.bytes(address) || !r.u64(max_msg) || !r.u32(window_msgs) || !r.u64(window_bytes)) {
    ++counters_.errors;
    OB_LOG_WARN("malformed hello (%zu B) dropped", hello.size());
    pending_boot_.erase(boot);
    return;
  }
  auto conn = std::make_shared<Connection::Impl>(hub_, config_);
  conn->counters = &counters_;
  conn->on_service = on_service_;
  conn->on_closed = on_closed_;
  conn->local_services = services_;
  conn->inline_services = inline_services_;
  conn->peer_id = peer_id;
  conn->peer_max_msg = max_msg;
  conn->send_msgs = window_msgs;
  conn->send_bytes = window_bytes;
  conn->peer_address = "client " + std::to_string(conn->local_id);
  conn->boot_ep = std::move(boot->second);
  pending_boot_.erase(boot);
  conn->start_data_endpoint(address);
  conn->bind_peer_ring(r);
  if (conn->state == Connection::Impl::State::kClosed) {
    ++counters_.errors;
    OB_LOG_WARN("%s", conn->reason.to_string().c_str());
    return;
  }
  conn->state = Connection::Impl::State::kOpen;
  Writer w;
  w.u32(conn->local_id);
  w.bytes(hub_->worker().address());
  w.u64(conn->config.max_msg_size);
  w.u32(conn->config.recv_window_msgs);
  w.u64(conn->config.recv_window_bytes);
  w.u32(static_cast<uint32_t>(services_.size()));
  for (const auto& name : services_) w.str(name);
  if (Status st = conn->open_ring(w); !st.ok()) {
    ++counters_.errors;
    OB_LOG_WARN("%s: %s", conn->peer_address.c_str(), st.to_string().c_str());
    conn->fail(st);
    return;
  }
  auto welcome = std::make_shared<std::vector<uint8_t>>(std::move(w.out()));
  FrameHeader h;
  h.type = FrameType::kWelcome;
  conn->post(h, *welcome, [welcome](Status) {});
  ++counters_.connects;
  OB_LOG_INFO("accepted %s", conn->peer_address.c_str());
  prune();
  conns_.push_back(std::move(conn));
}

void Server::prune() {
  std::erase_if(conns_, [](const auto& c) { return c->state == Connection::Impl::State::kClosed; });
}

size_t Server::connections() {
  Lock lock(hub_->mutex());
  prune();
  return conns_.size();
}

void Server::shut_down(const Status& why, Deadline deadline) {
  Lock lock(hub_->mutex());
  prune();
  auto pending = std::make_shared<size_t>(0);
  for (auto& c : conns_) {
    c->shut_down(why);
    ++*pending;
    c->data_ep.flush([pending](Status) { --*pending; });
  }
  hub_->wait_until(lock, deadline, 0, [&] { return *pending == 0; });
  for (auto& c : conns_) c->fail(why);
  conns_.clear();
}

}  // namespace outboard::channel
