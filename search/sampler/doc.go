// Package sampler holds the baseline goptuna samplers sgtune compares its
// own search with: a uniform random sampler, a grid sampler and goptuna's
// TPE behind seeded start-up draws. Random and grid are seeded without
// global state and reproducible: a draw depends only on the seed, the
// trial's number and the parameter's name.
//
// New builds one by name ("random", "grid", "tpe").
package sampler
