#include "channel/connection_impl.h"
#include "outboard/service.h"

namespace outboard {

void Responder::respond(Buffer response) const {
  if (!conn_) return;
  channel::Lock lock(conn_->hub->mutex());
  if (one_way_) return conn_->acknowledge(id_);
  conn_->respond(id_, std::move(response));
}

void Responder::fail(const Status& status) const {
  if (!conn_) return;
  channel::Lock lock(conn_->hub->mutex());
  if (one_way_) {
    if (conn_->counters) ++conn_->counters->errors;
    return conn_->acknowledge(id_);
  }
  conn_->respond(id_, status);
}

}  // namespace outboard
