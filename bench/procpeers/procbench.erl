%% The Erlang/OTP side of the proc scenarios (bench/procpeers), run by the
%% Go driver as:  erl -noshell +P 20000000 -pa DIR -s procbench main SCENARIO ARGS...
%% Each run prints one line:  RESULT <value>  (microseconds, or bytes).
-module(procbench).
-export([main/1, start_worker/1]).

main([Scenario | Args]) ->
    logger:set_primary_config(level, none),
    Ints = [list_to_integer(atom_to_list(A)) || A <- Args],
    Value = run(list_to_atom(atom_to_list(Scenario)), Ints),
    io:format("RESULT ~p~n", [Value]),
    init:stop().

now_us() -> erlang:monotonic_time(microsecond).

idle_loop(Count) ->
    receive
        stop -> ok;
        {work, From} -> From ! done, idle_loop(Count + 1);
        _ -> idle_loop(Count + 1)
    end.

spawn_idle(0, Acc) -> Acc;
spawn_idle(N, Acc) -> spawn_idle(N - 1, [spawn(fun() -> idle_loop(0) end) | Acc]).

%% idle N: bytes per idle process by erlang:memory(processes); the
%% process_info(Pid, memory) of one is printed to stderr beside it.
run(idle, [N]) ->
    garbage_collect(),
    Before = erlang:memory(processes),
    Pids = spawn_idle(N, []),
    After = erlang:memory(processes),
    {memory, One} = process_info(hd(Pids), memory),
    io:format(standard_error, "process_info(Pid, memory) = ~p~n", [One]),
    (After - Before) / N;
%% pinfo N: process_info(Pid, memory) of one of N idle processes.
run(pinfo, [N]) ->
    Pids = spawn_idle(N, []),
    {memory, One} = process_info(hd(Pids), memory),
    One;
%% worked N: bytes per process after each handled one message.
run(worked, [N]) ->
    garbage_collect(),
    Before = erlang:memory(processes),
    Pids = spawn_idle(N, []),
    Self = self(),
    [P ! {work, Self} || P <- Pids],
    wait(N),
    After = erlang:memory(processes),
    (After - Before) / N;
%% spawn N: microseconds to spawn N processes from a running process.
run(spawn, [N]) ->
    T0 = now_us(),
    _ = spawn_idle(N, []),
    now_us() - T0;
%% pingpong Alive Deliveries: a pair spawned after Alive idle processes.
run(pingpong, [Alive, Deliveries]) ->
    _ = spawn_idle(Alive, []),
    Self = self(),
    Pong = spawn(fun() -> player(Self) end),
    Ping = spawn(fun() -> player(Self) end),
    T0 = now_us(),
    Ping ! {ball, Pong, 1, Deliveries},
    receive finished -> ok end,
    now_us() - T0;
%% ready Ready PerProcess: Ready processes each resend to themselves.
run(ready, [Ready, PerProcess]) ->
    Self = self(),
    Pids = [spawn(fun() -> self_sender(Self) end) || _ <- lists:seq(1, Ready)],
    T0 = now_us(),
    [P ! {go, PerProcess} || P <- Pids],
    wait(Ready),
    now_us() - T0;
%% restart N: restarts of a crashing child under an OTP supervisor.
run(restart, [N]) ->
    T0 = now_us(),
    {ok, _Sup} = start_sup(self()),
    drive(N),
    now_us() - T0;
%% multicore Procs Messages Iterations: processes with a heavy handler
%% (Iterations rounds of a 28-bit xorshift, small integers only), each
%% resending to itself; run with +S 1:1 and +S 2:2 for the speedup.
run(multicore, [Procs, Messages, Iterations]) ->
    Self = self(),
    Pids = [spawn(fun() -> heavy(Self, Iterations, 0) end) || _ <- lists:seq(1, Procs)],
    T0 = now_us(),
    [P ! {work, Messages} || P <- Pids],
    wait(Procs),
    now_us() - T0.

heavy(Parent, Iterations, Sink) ->
    receive
        {work, 0} -> Parent ! done, Sink;
        {work, Left} ->
            X = xorshift(88172645 + Left, Iterations),
            self() ! {work, Left - 1},
            heavy(Parent, Iterations, Sink bxor X)
    end.

xorshift(X, 0) -> X;
xorshift(X, N) ->
    X1 = X bxor ((X bsl 13) band 16#FFFFFFF),
    X2 = X1 bxor (X1 bsr 7),
    X3 = X2 bxor ((X2 bsl 17) band 16#FFFFFFF),
    xorshift(X3, N - 1).

start_sup(Driver) ->
    Spec = #{id => w, start => {procbench, start_worker, [Driver]}, restart => permanent,
             shutdown => brutal_kill, type => worker},
    {ok, Pid} = supervisor:start_link(procbench_sup, {#{strategy => one_for_one, intensity => 1 bsl 30, period => 3600}, [Spec]}),
    {ok, Pid}.

start_worker(Driver) ->
    Pid = spawn_link(fun() ->
        Driver ! {started, self()},
        receive crash -> exit(crash) end
    end),
    {ok, Pid}.

drive(0) -> receive {started, _} -> ok end;
drive(N) ->
    receive {started, W} -> W ! crash end,
    drive(N - 1).

wait(0) -> ok;
wait(N) -> receive done -> wait(N - 1) end.

player(Parent) ->
    receive
        {ball, _Peer, Hits, Limit} when Hits >= Limit -> Parent ! finished;
        {ball, Peer, Hits, Limit} -> Peer ! {ball, self(), Hits + 1, Limit}, player(Parent)
    end.

self_sender(Parent) ->
    receive
        {go, 1} -> Parent ! done;
        {go, Left} -> self() ! {go, Left - 1}, self_sender(Parent)
    end.
