module github.com/forgeml/forge

go 1.26.0

require (
	github.com/chzyer/readline v1.5.1
	github.com/cli/browser v1.3.0
	github.com/creack/pty v1.1.24
	github.com/ebitengine/purego v0.11.3
	github.com/go-echarts/go-echarts/v2 v2.6.7
	github.com/guptarohit/asciigraph v0.10.0
	github.com/hinshun/vt10x v0.0.0-20220301184237-5011da428d02
	github.com/janpfeifer/gonb v0.11.5
	github.com/traefik/yaegi v0.16.1
	golang.org/x/sys v0.48.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/andybalholm/brotli v1.3.0 // indirect
	github.com/go-logr/logr v1.4.2 // indirect
	github.com/gofrs/uuid v4.4.0+incompatible // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/parquet-go/bitpack v1.0.3 // indirect
	github.com/parquet-go/jsonlite v1.5.5 // indirect
	github.com/parquet-go/parquet-go v0.32.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/twpayne/go-geom v1.6.1 // indirect
	golang.org/x/exp v0.0.0-20250106191152-7588d65b2ba8 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
)
