// The channel's access point into its public classes (include/outboard/
// channel.h declares it their only friend): building them around an Impl,
// and reaching a RemoteRegion's. Library code only.
#pragma once

#include <memory>

#include "outboard/channel.h"

namespace outboard::channel::detail {

// Defined beside the Impls they need complete (region.cpp, connection.cpp).
struct Access {
  static Region region(std::unique_ptr<Region::Impl> impl);
  static RemoteRegion remote_region(std::unique_ptr<RemoteRegion::Impl> impl);
  static const RemoteRegion::Impl& impl(const RemoteRegion& region) { return *region.impl_; }
  /// `owner`: the connection closes when this object goes (false: the
  /// agent's view of a client, which the client's end closes).
  static std::unique_ptr<Connection> connection(std::shared_ptr<Connection::Impl> impl, bool owner);
  static Connection::Impl& impl(Connection& c) { return *c.impl_; }
};

}  // namespace outboard::channel::detail
