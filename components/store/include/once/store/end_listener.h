// File: end_listener.h
//
// EndListener: hears, from the database, that executions ended (an
// EXECUTION_COMPLETED, _FAILED, _CANCELLED or _CONTINUED was committed), on
// whichever node or tool appended it. An App's Await waits on it instead of
// reading the log every poll interval (docs/queues.md, "Await").
//
//   auto listener = store::PostgresEndListener::Open({.conninfo = url, .schema = "loom"});
//   (*listener)->Start({.on_end = [](std::string_view id) { /* re-check id */ },
//                       .on_up = [](bool up) { /* up: re-check all; down: poll */ }});
//   ...
//   (*listener)->Stop();
//
// The contract:
// * on_end(id) is called at least once for every execution that ends while
//   the listener is up (it may also be called for ids nobody waits on, or
//   twice). Ends while it is down are NOT reported: on_up(true) after a
//   (re)connection says "re-check everything"; on_up(false) says "from now
//   on nothing is heard: poll".
// * up() is true only while a notification committed now would be heard.
// * Callbacks run on the listener's own thread, one at a time; they must not
//   call Start or Stop.
//
// Backends: PostgresEndListener (LISTEN/NOTIFY on a connection of its own).
// SQLite and memory have none: an App without a listener polls.

#pragma once

#include <functional>
#include <string_view>

namespace once::store {

struct EndHandlers {
  std::function<void(std::string_view id)> on_end;
  std::function<void(bool up)> on_up;
};

class EndListener {
 public:
  virtual ~EndListener() = default;
  // Starts the listener's thread (connects, listens, reconnects). Calling
  // Start while started replaces nothing and returns.
  virtual void Start(EndHandlers handlers) = 0;
  // Stops and joins the thread; on_up(false) is the last callback.
  // Idempotent.
  virtual void Stop() = 0;
  virtual bool up() const = 0;
};

}  // namespace once::store
