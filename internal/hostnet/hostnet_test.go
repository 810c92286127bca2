package hostnet

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A host reaches the bridge over its link, and not once the link is cut.
func TestHostsAndCut(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not found")
	}
	nw := New(t, 2)
	bridgeIP := strings.TrimSuffix(nw.Subnet, "0/24") + "254"
	ln, err := net.Listen("tcp", bridgeIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 16)
		n, _ := c.Read(b)
		got <- string(b[:n])
	}()
	send := func(host int) error {
		cmd := exec.Command(nw.Exec(host)[0], append(nw.Exec(host)[1:], "bash", "-c",
			"echo -n from-host > /dev/tcp/"+bridgeIP+"/"+strconv.Itoa(port))...)
		return cmd.Run()
	}
	if err := send(1); err != nil {
		t.Fatalf("host 1 cannot reach the bridge: %v", err)
	}
	select {
	case s := <-got:
		if s != "from-host" {
			t.Errorf("received %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing arrived from host 1")
	}
	if err := nw.Cut(0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- send(0) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("host 0 reached the bridge over a cut link")
		}
	case <-time.After(2 * time.Second): // the connect hangs: the link is cut
		nw.Kill(0)
	}
}
