module github.com/cpmla/cpmla

go 1.26.0

require (
	github.com/dlclark/regexp2 v1.12.0
	github.com/google/go-cmp v0.7.0
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.50.0
)

require github.com/inconshreveable/mousetrap v1.1.0 // indirect
