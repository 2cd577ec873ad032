case whereis(mqtt_node) of
    undefined ->
        case ra_directory:uid_of(coordination, mqtt_node) of
            undefined -> not_a_member;
            _ -> {restarted, ra:restart_server(coordination, {mqtt_node, node()})}
        end;
    _ -> running
end.
