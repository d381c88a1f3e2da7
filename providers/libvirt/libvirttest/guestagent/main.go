// Command guestagent is a minimal QEMU guest agent for the tiny guest of the libvirt
// end-to-end test (.ci/libvirt/build-guest.sh puts it in the guest's initramfs; the guest's
// init respawns it). It is test support, not part of egressd.
//
// It speaks the qemu-ga protocol on the virtio-serial port org.qemu.guest_agent.0 and knows
// just enough for libvirt and the test: guest-sync, guest-sync-delimited, guest-ping,
// guest-info, guest-network-get-interfaces (so libvirt's agent address source works),
// guest-get-host-name, guest-shutdown, and read-only guest-file-open/read/close (so the test
// can read the guest's boot timeline with `virsh qemu-agent-command`).
//
// Build it static for the guest: CGO_ENABLED=0 go build ./providers/libvirt/libvirttest/guestagent
package main

import (
	"errors"
	"flag"
	"io"
	"log"
	"os"
	"syscall"
	"time"
)

func main() {
	port := flag.String("port", "/dev/virtio-ports/org.qemu.guest_agent.0", "the agent's virtio-serial port")
	flag.Parse()
	log.SetPrefix("guestagent: ")
	a := &agent{hostname: os.Hostname, interfaces: systemInterfaces, shutdown: powerOff}
	for {
		// The port exists once virtio_console is loaded; reads end when the host side closes
		// (libvirtd restarted, domain being torn down), and the port is simply opened again.
		f, err := os.OpenFile(*port, os.O_RDWR, 0)
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		if err := a.serve(f); !errors.Is(err, io.EOF) { // serve returns only when reading fails
			log.Printf("%s: %v", *port, err)
		}
		a.closeFiles()
		f.Close()
		time.Sleep(200 * time.Millisecond)
	}
}

// powerOff stops the guest the way guest-shutdown asks: there is nothing to unmount in an
// initramfs-only guest, so it syncs and asks the kernel directly.
func powerOff(mode string) {
	time.Sleep(100 * time.Millisecond) // let the log line (if any) out
	syscall.Sync()
	cmd := syscall.LINUX_REBOOT_CMD_POWER_OFF
	switch mode {
	case "halt":
		cmd = syscall.LINUX_REBOOT_CMD_HALT
	case "reboot":
		cmd = syscall.LINUX_REBOOT_CMD_RESTART
	}
	if err := syscall.Reboot(cmd); err != nil {
		log.Printf("guest-shutdown %s: %v", mode, err)
	}
}
