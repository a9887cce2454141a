from client.dashboard.cli import main

main()
