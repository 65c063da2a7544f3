// Package sim is the simulator's model: profiles, memory model, performance
// model and fault rules. Only cmd/sglang-sim imports it.
package sim
