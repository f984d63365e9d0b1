#include "channel/server.h"
#include "outboard/service.h"

namespace outboard {

void Responder::respond(Buffer response) const {
  auto conn = conn_.lock();
  if (!conn) return;
  channel::Lock lock(conn->hub->mutex());
  if (one_way_) return conn->acknowledge(id_);
  conn->respond(id_, std::move(response));
}

void Responder::fail(const Status& status) const {
  auto conn = conn_.lock();
  if (!conn) return;
  channel::Lock lock(conn->hub->mutex());
  if (one_way_) {
    if (conn->counters) ++conn->counters->errors;
    return conn->acknowledge(id_);
  }
  conn->respond(id_, status);
}

}  // namespace outboard
