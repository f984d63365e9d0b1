// The services' access point into their public classes (include/outboard/
// service.h declares it Responder's only friend). Library code only.
#pragma once

#include <memory>
#include <utility>

#include "outboard/service.h"

namespace outboard::services::detail {

struct Access {
  /// Answers request `id` (or acknowledges one-way message `id`) of `conn`.
  static Responder responder(std::shared_ptr<Connection::Impl> conn, uint64_t id, bool one_way) {
    return Responder(std::move(conn), id, one_way);
  }
};

}  // namespace outboard::services::detail
