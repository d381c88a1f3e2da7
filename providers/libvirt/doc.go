// Package libvirt is the provider that runs each proxy as a QEMU/KVM virtual machine on
// libvirt hosts reached over SSH: it defines and starts a domain from a base image with a
// NoCloud seed carrying the proxy's user-data, finds its address, and deletes the domain and
// its volumes. It never imports NATS; the provisioner calls it through the provider contract.
package libvirt
