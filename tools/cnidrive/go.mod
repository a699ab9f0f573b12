module github.com/yh-genie/yh-genie/tools/cnidrive

go 1.22

require github.com/containernetworking/cni v1.3.1

require (
	go.opentelemetry.io/otel v1.29.0 // indirect
	go.opentelemetry.io/otel/trace v1.29.0 // indirect
)
