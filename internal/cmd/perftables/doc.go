// Command perftables measures every sessionwire operation beside the raw
// OpenTelemetry path it sits beside, and rewrites the performance tables of
// README.md from that one run, so the tables cannot drift from the code.
//
// It compiles each package's benchmarks once, then runs the packages in
// rounds (every package once per round, a row and its baseline side by side
// in one binary run), takes the median of each benchmark over the rounds
// and, for the comparison column, the median over the rounds of each round's
// own ratio (or difference) of a row to its baseline, and replaces what README.md holds between <!-- perf:NAME:start --> and
// <!-- perf:NAME:end --> markers. The time column is process CPU time per
// operation (cpu-ns/op) where a benchmark reports it: on a shared machine it
// moves far less with other load than wall time does. The reads (Lookup,
// Getenv and the bare member read beside them, about 40 ns each) run 1 s
// per round whatever -benchtime says, so that a moment of other work
// does not move a round's ratio by several points.
//
//	go run ./internal/cmd/perftables                    # 7 rounds, 0.2 s per benchmark
//	go run ./internal/cmd/perftables -rounds 8 -benchtime 0.5s
//	go run ./internal/cmd/perftables -n                 # print the tables, leave README.md alone
//	go run ./internal/cmd/perftables -profiles internal/cmd/perftables/profiles
//	go run ./internal/cmd/perftables -raw /tmp/run.txt  # keep the benchmark lines
//	go run ./internal/cmd/perftables -from /tmp/run.txt # render them again, running nothing
//
// Beside the tables it writes the "targets" table: each performance target
// of issue 15, how many of the rows it holds are within it in this run, and
// each row that is not, with its comparison (targets in main.go says which
// rows each holds).
//
// Each round also runs python/original_bench.py with python3: the Python
// original's bind and read, written out from the module sessionwire
// replaces, which the README's "Beside the Python original" table sets
// beside Bind and Getenv. Round r runs it with PYTHONHASHSEED=r: the
// original's bind costs about 40% more under a few hash seeds than under
// most, so a run measures it over the same seeds every time rather than
// over whichever its processes drew. Without python3 on the PATH the run
// stops before it starts and says so; -python "" leaves that table as it is.
//
// The same rounds run the whole calls: a unary gRPC call through otelgrpc,
// each row in a process of its own, and messages through Kafka (franz-go
// against in-process kfake) and a real RabbitMQ broker. perftables starts
// one broker for the run from Debian's rabbitmq-server (or uses the one
// SESSIONWIRE_AMQP_URL names); without one the run stops before it starts
// and says so, and -brokers=false leaves the broker table as it is.
//
// The garbage collector's share of a benchmark's CPU time grows with the live
// heap its loop runs beside (internal/benchcpu reports it as live-B). A row
// and its baseline that ran beside heaps the collector paces differently
// are named on stderr, and the README is then left as it is
// (-heapcheck=false rewrites it anyway).
//
// -profiles also records, into that directory, the CPU profile of each
// benchmark listed in profiles.go, with the shares of the parts of the
// function it divides (OpenTelemetry's calls, the policy's checks): the
// evidence behind the README's statements about where the time goes.
//
// Run it from the repository root on a machine doing nothing else.
package main
