module github.com/forgeml/forge

go 1.25.0

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
	golang.org/x/sys v0.47.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/go-logr/logr v1.4.2 // indirect
	github.com/gofrs/uuid v4.4.0+incompatible // indirect
	github.com/pkg/errors v0.9.1 // indirect
	golang.org/x/exp v0.0.0-20250106191152-7588d65b2ba8 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
)
