package server

import (
	"context"
	"testing"
	"time"
)

func TestByteBudget(t *testing.T) {
	t.Parallel()
	b := newByteBudget(100)
	ctx := context.Background()
	if err := b.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	// 60 + 50 > 100: waits, in order, ahead of a smaller one that would fit.
	got := make(chan int64, 2)
	go func() { b.acquire(ctx, 50); got <- 50 }()
	waitWaiters(t, b, 1)
	go func() { b.acquire(ctx, 10); got <- 10 }()
	waitWaiters(t, b, 2)
	select {
	case n := <-got:
		t.Fatalf("%d was admitted past the one ahead of it", n)
	case <-time.After(20 * time.Millisecond):
	}
	b.release(60)
	if a, c := <-got, <-got; a+c != 60 {
		t.Fatalf("admitted %d and %d, want 50 and 10", a, c)
	}
	b.release(60)
	if b.inUse() != 0 {
		t.Fatalf("%d bytes in use after every release", b.inUse())
	}

	// A weight above the capacity is admitted alone.
	if err := b.acquire(ctx, 500); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := b.acquire(short, 1); err == nil {
		t.Fatal("admitted beside a body over the capacity")
	}
	b.release(500)

	// A waiter that gives up lets the ones behind it through.
	b.acquire(ctx, 90)
	gaveUp, cancel2 := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.acquire(gaveUp, 50) }()
	waitWaiters(t, b, 1)
	small := make(chan struct{})
	go func() { b.acquire(ctx, 5); close(small) }()
	waitWaiters(t, b, 2)
	cancel2()
	if err := <-done; err == nil {
		t.Fatal("a cancelled wait succeeded")
	}
	<-small
	b.release(90)
	b.release(5)
	if b.inUse() != 0 {
		t.Fatalf("%d bytes in use", b.inUse())
	}
}

func waitWaiters(t *testing.T, b *byteBudget, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		b.mu.Lock()
		k := len(b.waiters)
		b.mu.Unlock()
		if k == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", k, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBufferPool(t *testing.T) {
	t.Parallel()
	p := &bufferPool{max: 100}
	a := p.get(60)
	p.put(a)
	if b := p.get(50); cap(b) != cap(a) {
		t.Fatalf("a free buffer that fits was not reused")
	}
	p.put(make([]byte, 60))
	p.put(make([]byte, 60)) // over the pool's bound: dropped
	if p.size > p.max {
		t.Fatalf("the pool holds %d bytes, more than its %d", p.size, p.max)
	}
	if b := p.get(80); len(b) != 80 {
		t.Fatalf("len %d, want 80", len(b))
	}
}

// TestBodyBufferComesBackFirst: a large body's buffer is back in the pool before its bytes go back to the
// budget, so the body the budget admits next reuses it; a burst of large bodies then holds one buffer, not
// one more each time the next body wins the race to the pool.
func TestBodyBufferComesBackFirst(t *testing.T) {
	t.Parallel()
	const size = 60
	budget := newByteBudget(100)
	pool := &bufferPool{max: 100}
	if err := budget.acquire(context.Background(), size); err != nil {
		t.Fatal(err)
	}
	buf := pool.get(size)
	next := make(chan []byte)
	go func() {
		if err := budget.acquire(context.Background(), size); err != nil {
			t.Error(err)
		}
		next <- pool.get(size)
	}()
	waitWaiters(t, budget, 1)
	release := giveBack(pool, buf, func() {
		if pool.size != size {
			t.Errorf("the budget was given back while the pool holds %d bytes: the buffer was not back yet", pool.size)
		}
		budget.release(size)
	})
	release()
	release() // idempotent
	if got := <-next; &got[:1][0] != &buf[:1][0] {
		t.Error("the next body got a new buffer")
	}
}
