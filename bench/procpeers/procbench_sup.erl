%% The supervisor callback module of procbench's restart scenario.
-module(procbench_sup).
-behaviour(supervisor).
-export([init/1]).

init({Flags, Children}) -> {ok, {Flags, Children}}.
