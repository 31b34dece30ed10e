//go:build !mixed_planted

package main

// planted is the deliberate bug of a build with the mixed_planted tag.
const planted = false
