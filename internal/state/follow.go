package state

import (
	"context"
	"log/slog"
	"time"
)

// Following a topic. Delivery is at most once, so a consumer that keeps
// a replica in step with the others through the bus needs two paths: one
// per message (apply the change it names) and one after a gap (re-read
// the source of truth in full). Follow runs the loop both paths hang off,
// so each consumer writes only what its messages mean.

// Defaults of FollowOptions.
const (
	// DefaultFollowRetry is how long Follow waits before subscribing
	// again after the bus failed.
	DefaultFollowRetry = time.Second
	// DefaultFollowTimeout bounds one subscribe and one Resync.
	DefaultFollowTimeout = 2 * time.Second
)

// FollowOptions says what Follow follows and what it does with it.
type FollowOptions struct {
	// Topics are subscribed to together (at least one).
	Topics []string
	// Handle applies one message (never a Lost marker), in the order of
	// the subscription. It runs on Follow's goroutine: a slow Handle
	// delays the next message and, past SubscriptionBuffer, loses some
	// (then Resync runs).
	Handle func(ctx context.Context, m Message)
	// Resync re-reads everything the messages could have said: it runs
	// after every subscription (what was published before it was missed)
	// and on every Lost marker. Its ctx ends after Timeout. When it
	// fails, it runs again every Retry until it succeeds (messages are
	// handled meanwhile).
	Resync func(ctx context.Context) error
	// What names what is followed in log lines ("terminations").
	What string
	// Logger gets one warning when following fails and one line when it
	// works again (not one per retry); nil: discarded.
	Logger *slog.Logger
	// Retry is the pause between failed subscriptions; 0:
	// DefaultFollowRetry.
	Retry time.Duration
	// Timeout bounds each subscribe and each Resync; 0:
	// DefaultFollowTimeout.
	Timeout time.Duration
	// Heard, when set, learns when this follower may have missed
	// messages (its subscription failed, ended or reported a gap) and
	// when it resynchronised after that; Follow subscribes afresh when
	// Heard says the backend recovered. What names the follower in it
	// (Heard.Track it before Follow runs).
	Heard *Heard
}

// Follow subscribes to o.Topics on ps and feeds o.Handle and o.Resync
// until ctx ends, subscribing again whenever the subscription fails or
// ends. It blocks; run it on its own goroutine. When it returns, its
// subscription is closed.
func Follow(ctx context.Context, ps PubSub, o FollowOptions) {
	if o.Retry <= 0 {
		o.Retry = DefaultFollowRetry
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultFollowTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	log := o.Logger
	o.Heard.Track(o.What)
	resync := func() error {
		done := o.Heard.begin(o.What)
		rctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		err := o.Resync(rctx)
		done(err == nil)
		return err
	}
	failing := false
	for {
		sctx, cancel := context.WithTimeout(ctx, o.Timeout)
		sub, err := ps.Subscribe(sctx, o.Topics...)
		cancel()
		if err != nil {
			o.Heard.lost(o.What)
			if ctx.Err() != nil {
				return
			}
			if !failing {
				failing = true
				log.Warn("cannot follow the other replicas; retrying", "following", o.What, "error", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(o.Retry):
			}
			continue
		}
		if failing {
			failing = false
			log.Info("following the other replicas again", "following", o.What)
		}
		ok := read(ctx, sub, o, resync)
		// Ended, or renewed: what is published until the next
		// subscription is missed.
		o.Heard.lost(o.What)
		if !ok {
			return
		}
	}
}

// read consumes sub until it ends: false when ctx ended, true when the
// subscription did or o.Heard asks for a new one (subscribe again).
func read(ctx context.Context, sub Subscription, o FollowOptions, resync func() error) bool {
	defer sub.Close()
	renew := o.Heard.renewal()
	var (
		again   <-chan time.Time // a failed resync's retry
		failing bool             // warned once, until a resync works
	)
	resyncNow := func() {
		again = nil
		err := resync()
		switch {
		case err != nil && !failing:
			failing = true
			o.Logger.Warn("resynchronising with the other replicas failed; retrying", "following", o.What, "error", err)
		case err == nil && failing:
			failing = false
			o.Logger.Info("resynchronised with the other replicas", "following", o.What)
		}
		if err != nil {
			again = time.After(o.Retry)
		}
	}
	// Messages published before this subscription were missed.
	resyncNow()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-again:
			resyncNow()
		case <-renew:
			return true
		case m, ok := <-sub.C():
			if !ok {
				return ctx.Err() == nil
			}
			if m.Lost {
				resyncNow()
				continue
			}
			o.Handle(ctx, m)
		}
	}
}
