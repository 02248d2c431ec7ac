package troubleshoot

import "testing"

// TestMismatchStringWithoutService: a frontend no service port has prints
// without a service.
func TestMismatchStringWithoutService(t *testing.T) {
	d := Mismatch{Kind: Extra, Frontend: "172.30.0.20:5432/TCP", Detail: "the kernel serves this frontend, no service port of the model has it"}
	if got, want := d.String(), "no service: extra at 172.30.0.20:5432/TCP: the kernel serves this frontend, no service port of the model has it"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
