// Command sglang-sim is a simulated SGLang server: same flags, startup log
// lines, endpoints and SSE chunks as SGLang, with the memory arithmetic,
// performance and faults of a profile calibrated on the seed studies.
package main

func main() {}
