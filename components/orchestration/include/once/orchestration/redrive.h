// File: redrive.h
//
// RedriveWiring: what a resume path needs to hand a contended resume to the
// TimerService instead of to an operator (design record D4): the TimerStore
// the first re-drive row (attempt 0) is written to, and the TimerService the
// path registers its Redriver with. App::Redrive() hands it out only when
// kernel.features.redrive is on and timers are configured; without it a
// contended resume goes to on_error (and Recover() later).
//
//   ChildSupervisor supervisor(rt, clock, rng, {.redrive = app.Redrive().value()});

#pragma once

#include "once/timers/timer_service.h"
#include "once/timers/timer_store.h"

namespace once::orchestration {

struct RedriveWiring {
  timers::TimerStore* timers = nullptr;     // where re-drive rows are written
  timers::TimerService* service = nullptr;  // where the re-driver is registered
};

}  // namespace once::orchestration
