#include "once/store_postgres/postgres_end_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>

#include "once/store_postgres/postgres_event_store.h"
#include "pg_conn.h"
#include "sql.h"

namespace once::store {

namespace {

// Installs the end trigger under the schema's migration lock.
Status InstallTrigger(const PostgresEndListenerOptions& options, const std::string& channel) {
  return pg::MigrateUnderLock(options.conninfo, options.schema, kMigrationLockKey,
                              options.migration_lock_timeout_ms, [&](pg::Conn& conn) -> Status {
                                ONCE_RETURN_IF_ERROR(conn.Exec(sql::CreateEndTriggerSql(channel)));
                                return Ok();
                              });
}

}  // namespace

PostgresEndListener::PostgresEndListener(PostgresEndListenerOptions options)
    : options_(std::move(options)), channel_(sql::EndChannel(options_.schema)) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

PostgresEndListener::~PostgresEndListener() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

Result<std::unique_ptr<PostgresEndListener>> PostgresEndListener::Open(
    PostgresEndListenerOptions options) {
  if (options.schema.empty() || options.reconnect_interval_ms <= 0 ||
      options.check_interval_ms <= 0 || options.migration_lock_timeout_ms < 0) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "PostgresEndListenerOptions: schema must be set, reconnect_interval_ms and "
                     "check_interval_ms > 0, migration_lock_timeout_ms >= 0");
  }
  std::unique_ptr<PostgresEndListener> listener(new PostgresEndListener(std::move(options)));
  if (listener->wake_fd_ < 0) {
    return MakeError(ErrorCode::kUnavailable, "end listener: eventfd failed");
  }
  ONCE_RETURN_IF_ERROR(InstallTrigger(listener->options_, listener->channel_));
  return listener;
}

void PostgresEndListener::Start(EndHandlers handlers) {
  std::lock_guard lock(start_mu_);
  if (thread_.joinable()) return;
  handlers_ = std::move(handlers);
  stopping_.store(false);
  uint64_t drained = 0;
  (void)!read(wake_fd_, &drained, sizeof drained);  // a wake left by an earlier Stop
  thread_ = std::thread([this] { Run(); });
}

void PostgresEndListener::Stop() {
  std::lock_guard lock(start_mu_);
  if (!thread_.joinable()) return;
  stopping_.store(true);
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  thread_.join();
}

void PostgresEndListener::SetUp(bool up) {
  if (up_.exchange(up) == up) return;
  if (handlers_.on_up) handlers_.on_up(up);
}

bool PostgresEndListener::Pause(int64_t ms) {
  pollfd p{.fd = wake_fd_, .events = POLLIN, .revents = 0};
  (void)poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, INT32_MAX)));
  return stopping_.load();
}

void PostgresEndListener::Run() {
  while (!stopping_.load()) {
    ListenOnce();
    SetUp(false);
    backend_pid_.store(0);
    if (Pause(options_.reconnect_interval_ms)) break;
  }
  SetUp(false);
}

void PostgresEndListener::ListenOnce() {
  Result<std::unique_ptr<pg::Conn>> conn = pg::Connect(options_.conninfo, options_.schema);
  if (!conn) return;
  pg::Conn& c = **conn;
  if (!c.Exec("LISTEN " + pg::QuoteIdentifier(channel_))) return;
  backend_pid_.store(PQbackendPID(c.raw()));
  SetUp(true);  // every end committed from now on is heard
  auto deliver = [&] {
    while (PGnotify* n = PQnotifies(c.raw())) {
      std::string_view id(n->extra ? n->extra : "");
      if (handlers_.on_end && !id.empty()) handlers_.on_end(id);
      PQfreemem(n);
    }
  };
  deliver();
  while (!stopping_.load()) {
    pollfd fds[2] = {{.fd = PQsocket(c.raw()), .events = POLLIN, .revents = 0},
                     {.fd = wake_fd_, .events = POLLIN, .revents = 0}};
    int ready =
        poll(fds, 2, static_cast<int>(std::min<int64_t>(options_.check_interval_ms, INT32_MAX)));
    if (ready < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;  // Stop
    if (ready == 0) {                 // quiet: is the connection still there?
      if (!c.Exec("SELECT 1") || c.broken()) return;
    } else if (fds[0].revents != 0) {
      if (PQconsumeInput(c.raw()) == 0 || c.broken()) return;
    }
    deliver();
  }
}

}  // namespace once::store
