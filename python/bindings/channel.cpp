// outboard._core channel classes: Connection, Region, RemoteRegion.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common.h"
#include "outboard/channel.h"

namespace outboard {
namespace {

using namespace nb::literals;
using ByteArray = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
// Any C-contiguous array on any device: numpy's, or torch's on the CPU or a GPU (DLPack).
using AnyArray = nb::ndarray<nb::c_contig>;

// Copies into memory this core does not read next (a snapshot the agent reads) with
// non-temporal stores: no read-for-ownership of each destination line, and the caller's working
// set stays in its caches. stream_fence() orders them before whatever follows.
void stream_copy(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__SSE2__)
  const size_t head = std::min(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  for (; n >= 64; dst += 64, src += 64, n -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
#endif
  std::memcpy(dst, src, n);
}

void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// A registered region and, for user memory, the array that owns it.
struct PyRegion {
  Region region;
  nb::object owner;
};

}  // namespace

void bind_channel(nb::module_& m) {
  nb::class_<PyRegion>(m, "Region")
      .def_prop_ro("size", [](const PyRegion& r) { return r.region.size(); })
      .def_prop_ro("descriptor", [](const PyRegion& r) {
        auto d = r.region.descriptor();
        return nb::bytes(reinterpret_cast<const char*>(d.data()), d.size());
      })
      .def_prop_ro("gpu", [](const PyRegion& r) { return r.region.kind() == MemoryKind::kCuda; },
                   "Whether the region is GPU memory, which the CPU must not touch.")
      .def("array", [](PyRegion& r) {
        if (r.region.kind() == MemoryKind::kCuda)
          raise(Status(Code::kInvalidArgument, "a numpy view of a GPU memory region: the CPU cannot read it"));
        return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(r.region.data(), {r.region.size()}, nb::find(&r));
      }, "A numpy view of the region (no copy).")
      .def("gather",
           [](PyRegion& r, const std::vector<nb::object>& sources, const std::vector<uint64_t>& offsets) {
             // Each source: an object with the buffer protocol (C-contiguous), or (address, size) of this
             // process's memory, e.g. a torch CPU tensor's data_ptr(), which torch exports no buffer for.
             const size_t n = sources.size();
             if (offsets.size() != n)
               raise(Status(Code::kInvalidArgument,
                            "gather: " + std::to_string(n) + " sources, " + std::to_string(offsets.size()) + " offsets"));
             struct Held {  // the sources' buffers, released on every way out (with the GIL held)
               std::vector<Py_buffer> views;
               ~Held() {
                 for (Py_buffer& v : views) PyBuffer_Release(&v);
               }
             } held;
             held.views.reserve(n);
             struct Part {
               const void* from;
               uint64_t size;
             };
             std::vector<Part> parts(n);
             const uint64_t size = r.region.size();
             for (size_t i = 0; i < n; ++i) {
               const nb::object& s = sources[i];
               if (nb::isinstance<nb::tuple>(s)) {
                 auto t = nb::borrow<nb::tuple>(s);
                 uintptr_t address = 0;
                 uint64_t bytes = 0;
                 if (t.size() != 2 || !nb::try_cast(t[0], address) || !nb::try_cast(t[1], bytes))
                   raise(Status(Code::kInvalidArgument,
                                "gather: source " + std::to_string(i) + " is a tuple but not (address, size)"));
                 parts[i] = {reinterpret_cast<const void*>(address), bytes};
               } else {
                 Py_buffer v;
                 if (PyObject_GetBuffer(s.ptr(), &v, PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
                 held.views.push_back(v);
                 parts[i] = {v.buf, static_cast<uint64_t>(v.len)};
               }
               if (offsets[i] > size || parts[i].size > size - offsets[i])
                 raise(Status(Code::kInvalidArgument, "gather: source " + std::to_string(i) + " (" +
                                                          std::to_string(parts[i].size) + " B at " +
                                                          std::to_string(offsets[i]) + ") ends past the region's " +
                                                          std::to_string(size) + " B"));
             }
             nb::gil_scoped_release release;
             for (size_t i = 0; i < n; ++i)
               stream_copy(r.region.data() + offsets[i], static_cast<const uint8_t*>(parts[i].from), parts[i].size);
             stream_fence();
           },
           "sources"_a, "offsets"_a,
           "Copies each source to its offset in the region, all in one call (a snapshot of many arrays): "
           "an object with the buffer protocol, or (address, size) of memory of this process that the "
           "caller keeps alive. The region's bounds are checked.");

  nb::class_<RemoteRegion>(m, "RemoteRegion")
      .def_prop_ro("size", &RemoteRegion::size)
      .def_prop_ro("mapped", &RemoteRegion::mapped,
                   "True when the peer's region is mapped into this process: one-sided calls are CPU copies.");

  nb::class_<Connection>(m, "Connection")
      .def_static(
          "connect",
          [](const std::string& address, uint64_t max_msg_size, double connect_timeout, uint64_t keepalive_ms,
             uint32_t spin_us, bool adaptive_spin, bool map_peer_regions, uint32_t ring_slots,
             const std::string& session, const std::string& secure, const std::string& cert, const std::string& key,
             const std::string& ca, const std::string& psk_file, const std::string& crl, const std::string& agent_host,
             uint64_t rekey_bytes, uint32_t tls_session_lifetime_s) {
            ChannelConfig cfg;
            if (secure == "always") cfg.secure.mode = SecureConfig::Mode::kAlways;
            else if (secure != "auto")
              check(Status(Code::kBadConfig, "secure is '" + secure + "', expected auto or always"));
            cfg.secure.cert = cert;
            cfg.secure.key = key;
            cfg.secure.ca = ca;
            cfg.secure.psk_file = psk_file;
            cfg.secure.crl = crl;
            cfg.secure.agent_host = agent_host;
            cfg.secure.rekey_bytes = rekey_bytes;
            cfg.secure.session_lifetime_s = tls_session_lifetime_s;
            cfg.session = session;
            cfg.map_peer_regions = map_peer_regions;
            cfg.ring_slots = ring_slots;
            cfg.max_msg_size = max_msg_size;
            cfg.connect_timeout_ms = static_cast<int64_t>(connect_timeout * 1000);
            cfg.keepalive_ms = keepalive_ms;
            cfg.spin_us = spin_us;
            cfg.adaptive_spin = adaptive_spin;
            nb::gil_scoped_release release;
            return unwrap(Connection::connect(address, cfg));
          },
          "address"_a, "max_msg_size"_a = ChannelConfig{}.max_msg_size, "connect_timeout"_a = 5.0,
          "keepalive_ms"_a = ChannelConfig{}.keepalive_ms, "spin_us"_a = ChannelConfig{}.spin_us,
          "adaptive_spin"_a = ChannelConfig{}.adaptive_spin,
          "map_peer_regions"_a = ChannelConfig{}.map_peer_regions, "ring_slots"_a = ChannelConfig{}.ring_slots,
          "session"_a = "", "secure"_a = "auto", "cert"_a = "", "key"_a = "", "ca"_a = "", "psk_file"_a = "",
          "crl"_a = "", "agent_host"_a = "", "rekey_bytes"_a = SecureConfig{}.rekey_bytes,
          "tls_session_lifetime_s"_a = SecureConfig{}.session_lifetime_s)
      .def("request",
           [](Connection& c, std::string_view service, nb::bytes payload, double timeout) {
             Result<Buffer> r = [&] {
               nb::gil_scoped_release release;
               return c.request(service, view(payload), deadline_in(timeout));
             }();
             return to_bytes(unwrap(std::move(r)));
           },
           "service"_a, "payload"_a, "timeout"_a)
      .def("send",
           [](Connection& c, nb::bytes payload, std::string_view service, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.send(view(payload), deadline_in(timeout), service);
             }
             check(st);
           },
           "payload"_a, "service"_a, "timeout"_a)
      .def("receive",
           [](Connection& c, double timeout) {
             Result<Incoming> r = [&] {
               nb::gil_scoped_release release;
               return c.receive(deadline_in(timeout));
             }();
             Incoming in = unwrap(std::move(r));
             if (in.kind == Incoming::Kind::kNotify) return nb::make_tuple("notify", in.cookie, in.offset, in.length);
             return nb::make_tuple("message", to_bytes(in.data));
           },
           "timeout"_a)
      .def("progress", &Connection::progress, nb::call_guard<nb::gil_scoped_release>())
      .def("progress_until_idle", &Connection::progress_until_idle, "max_rounds"_a,
           nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("event_fd", &Connection::event_fd)
      .def("arm",
           [](Connection& c) {
             nb::gil_scoped_release release;  // arm() progresses first
             Status st = c.arm();
             if (st.code() == Code::kAgain) return false;
             check(st);
             return true;
           },
           "Arms event_fd; False when events are pending (call progress instead of waiting).")
      .def("submit",
           [](Connection& c, std::string_view service, nb::bytes payload, double timeout, nb::callable done) {
             // The callback runs inside progress() (GIL released there): take it back.
             auto fn = std::make_shared<nb::object>(done);
             check(c.submit(service, Buffer::copy_of(view(payload)), deadline_in(timeout),
                            [fn](Result<Buffer> r) {
                              nb::gil_scoped_acquire gil;
                              if (r.ok())
                                (*fn)(to_bytes(r.value()), nb::none());
                              else
                                (*fn)(nb::none(), nb::module_::import_("outboard.errors")
                                                      .attr("from_code")(static_cast<int>(r.status().code()),
                                                                         r.status().message()));
                              fn->reset();
                            }));
           },
           "service"_a, "payload"_a, "timeout"_a, "done"_a,
           "Asynchronous request: done(response, error) runs from progress(). Raises Again without credit.")
      .def("close", &Connection::close, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("is_open", &Connection::is_open)
      .def_prop_ro("close_reason", [](const Connection& c) { return c.close_reason().to_string(); })
      .def_prop_ro("peer_max_msg_size", &Connection::peer_max_msg_size)
      .def_prop_ro("peer_services", &Connection::peer_services)
      .def_prop_ro("agent_info",
                   [](const Connection& c) {
                     nb::dict info;
                     for (const auto& [name, value] : c.agent_info()) info[name.c_str()] = value;
                     return info;
                   })
      .def_prop_ro("send_credits", &Connection::send_credits)
      .def_prop_ro("lanes", &Connection::lanes)
      .def_prop_ro("security", &Connection::security,
                   "How this connection is protected: \"plaintext\", or TLS 1.3 with the key exchange, the agent's "
                   "identity and whether the session was resumed.")
      .def("register_memory",
           [](Connection& c, nb::object source) {
             AnyArray array;  // never a copy: the peer must reach the caller's own memory
             if (!nb::try_cast(source, array, /*convert=*/false))
               raise(Status(Code::kInvalidArgument, "register_memory takes a C-contiguous array (numpy's, or a "
                                                    "tensor by DLPack), not this " +
                                                        std::string(nb::inst_name(source).c_str())));
             auto r = c.register_memory(array.data(), array.nbytes(), memory_kind(array.device_type()));
             return PyRegion{unwrap(std::move(r)), std::move(source)};
           },
           "array"_a, nb::keep_alive<0, 1>(),
           "Registers a C-contiguous array's memory for the peer to reach: numpy's, or torch's on the CPU or "
           "a CUDA device (GPU memory needs a UCX with CUDA).")
      .def("allocate_memory", [](Connection& c, size_t size) { return PyRegion{unwrap(c.allocate_memory(size)), {}}; },
           "size"_a)
      .def("import_region", [](Connection& c, nb::bytes d) { return unwrap(c.import_region(view(d))); }, "descriptor"_a)
      .def("put",
           [](Connection& c, const RemoteRegion& r, uint64_t offset, nb::bytes data, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.put(r, offset, view(data), deadline_in(timeout));
             }
             check(st);
           },
           "region"_a, "offset"_a, "data"_a, "timeout"_a)
      .def("get",
           [](Connection& c, const RemoteRegion& r, uint64_t offset, size_t size, double timeout) {
             Buffer out(size);
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.get(r, offset, out.span(), deadline_in(timeout));
             }
             check(st);
             return to_bytes(out);
           },
           "region"_a, "offset"_a, "size"_a, "timeout"_a)
      .def("flush",
           [](Connection& c, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.flush(deadline_in(timeout));
             }
             check(st);
           },
           "timeout"_a)
      .def("put_notify",
           [](Connection& c, const RemoteRegion& r, uint64_t offset, nb::bytes data, uint64_t cookie, double timeout,
              std::string_view service) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.put_notify(r, offset, view(data), cookie, deadline_in(timeout), service);
             }
             check(st);
           },
           "region"_a, "offset"_a, "data"_a, "cookie"_a, "timeout"_a, "service"_a = "")
      .def("put_signal",
           [](Connection& c, const RemoteRegion& r, uint64_t offset, nb::bytes data, uint64_t signal_offset,
              uint64_t signal, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.put_signal(r, offset, view(data), signal_offset, signal, deadline_in(timeout));
             }
             check(st);
           },
           "region"_a, "offset"_a, "data"_a, "signal_offset"_a, "signal"_a, "timeout"_a,
           "Put, then the 8-byte signal, ordered: a peer polling the signal word sees the data.")
      .def("wait_signal",
           [](Connection& c, const PyRegion& r, uint64_t offset, uint64_t at_least, double timeout) {
             Status st;
             {
               nb::gil_scoped_release release;
               st = c.wait_signal(r.region, offset, at_least, deadline_in(timeout));
             }
             check(st);
           },
           "region"_a, "offset"_a, "at_least"_a, "timeout"_a,
           "Busy-polls until the 8-byte word at offset of our region is at least at_least (a peer's put_signal).")
      .def("fence", [](Connection& c) { check(c.fence()); });
}

}  // namespace outboard
