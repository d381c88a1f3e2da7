package libvirt

import (
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"
)

// link is one SSH connection to a host with go-libvirt on its forwarded socket.
//
// Killing a link must never wait (H1): a transfer stalled on a host that vanished without a
// FIN holds the SSH channel's write lock for as long as the kernel retransmits (about 15
// minutes), and closing the channel, or go-libvirt's Disconnect, would queue behind it. So a
// link dies in two lock-free steps: it is marked dead and the dead channel is closed, which
// releases every caller waiting on it, and then the TCP socket is closed, which fails every
// read and write on it through the poller. Nothing runs under a sync.Once, which would queue
// callers behind a slow first kill.
type link struct {
	host      string
	tcp       net.Conn
	client    *ssh.Client
	lv        *golibvirt.Libvirt
	dedicated bool // one caller's only: a transfer or a health check
	log       *slog.Logger

	dead   chan struct{}
	isDead atomic.Bool
	why    atomic.Pointer[string]
}

// kill marks the link dead, then closes its socket. Safe to call any number of times, from
// any goroutine; it returns at once.
func (l *link) kill(reason string) {
	if !l.isDead.CompareAndSwap(false, true) {
		return
	}
	l.why.Store(&reason)
	close(l.dead)
	_ = l.tcp.Close()
	l.log.Debug("libvirt connection closed", "host", l.host, "reason", reason)
}

func (l *link) alive() bool { return !l.isDead.Load() }

// reason is why the link died, once it has.
func (l *link) reason() string {
	if r := l.why.Load(); r != nil {
		return *r
	}
	return "closed"
}

// watch starts the link's watchers, which end when it dies: SSH keepalives (a host that
// stops answering is dropped within two intervals instead of when TCP gives up), and the
// ends of the SSH connection and of go-libvirt's socket.
func (l *link) watch(every time.Duration) {
	go func() {
		l.client.Wait()
		l.kill("ssh connection ended")
	}()
	gone := l.lv.Disconnected()
	go func() {
		select {
		case <-gone:
			l.kill("libvirt connection lost")
		case <-l.dead:
		}
	}()
	go l.keepalive(every)
}

func (l *link) keepalive(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.dead:
			return
		case <-t.C:
		}
		// SendRequest returns once the link dies, so this goroutine ends with it.
		answered := make(chan error, 1)
		go func() {
			_, _, err := l.client.SendRequest("keepalive@openssh.com", true, nil)
			answered <- err
		}()
		wait := time.NewTimer(every)
		select {
		case err := <-answered:
			wait.Stop()
			if err != nil {
				l.kill("keepalive failed: " + err.Error())
				return
			}
		case <-wait.C:
			l.kill("keepalive unanswered for " + every.String())
			return
		case <-l.dead:
			wait.Stop()
			return
		}
	}
}
